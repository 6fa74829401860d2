"""Unit constants: one definition, so a memory figure means the same in the engine, the sandbox and the tuner."""

GIB = 1 << 30  # bytes in a GiB: VRAM ceilings, memory estimates and sandbox limits are all quoted in GiB
