"""Streams on S3-compatible storage: write-ahead log, objects, uploads and epoch-fenced ownership."""
