"""`collc export`: a schedule as MSCCL-IR XML or as the IR JSON (docs/msccl.md)."""
