"""Export of the best configuration: spectune.yaml, llama-server, vLLM, SGLang and TensorRT-LLM files, and a README."""

from export.record import ExportRecord, Mapping
from export.write import write_exports

__all__ = ["ExportRecord", "Mapping", "write_exports"]
