"""Controller operations: pure functions ``(image, args, ctx) -> ControllerResult`` (see operations.py)."""
