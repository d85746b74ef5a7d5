"""The op families, one package each: its case type, strategies, FP64 truth and bounds, laws, and
the OpSpec registrations of its ops (docs/extending.md). Importing a family's package registers
its ops and its laws."""
