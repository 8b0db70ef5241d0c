"""The bottom floor every layer shares: errors, strict config, back-off, HTTP parsing, auth, value validators and the object-key contract.

It imports nothing else of the project (tests/test_layers.py holds it to that), so stream_storage and the
broker can use it without knowing the metadata quorum, which sits beside it in this namespace only
because the top-level packages are fixed."""
