"""`ferry s3 …`: the embedded S3 endpoint (stream_storage/s3_server.py) and `ferry s3 check` (tools/s3_check.py)."""
from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    if argv[:1] == ["check"]:
        from tools.s3_check import main as check_main

        return check_main(argv[1:])
    from stream_storage.s3_server import main as server_main

    return server_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
