"""Compatibility shim installed into sglperf's managed SGLang-on-CPU environments (sglperf itself never runs it).

`sglperf env build VERSION --cpu` copies this file into the environment's site-packages as
``sglperf_cpu_shim.py`` with a ``.pth`` line importing it, so every process of that interpreter loads it,
including the scheduler and detokenizer SGLang spawns. Importing it costs nothing: it only registers
three post-import hooks, which act when their module is first imported.

1. ``sgl_kernel`` (the CPU kernel 0.4.6.post1): SGLang 0.5.23's CPU graph runner (``--enable-torch-compile``)
   registers fake kernels for three ops this kernel build lacks (``fused_dual_residual_rmsnorm_cpu``,
   ``fused_moe_router_cpu``, ``fp8_per_tensor_scaled_mm_cpu``) and fails without them. They are declared
   here with ``torch.library``; calling one raises (no tiny model the suite serves uses them).
2. ``sglang.srt.models.qwen3_5``: SGLang 0.5.23 calls ``fused_sigmoid_mul_cpu(x, gate)``, whose schema in
   this kernel is ``(Tensor(a!) input, Tensor gate, bool inplace)``; the call gets ``inplace=True``.

3. ``sglang.srt.utils.common`` on a CPU without AMX (an AMD EPYC with AVX-512, say): SGLang takes its
   CPU serving path (``intel_amx`` attention, packed weights, the kernel's fused ops) only when
   ``torch.cpu._is_amx_tile_supported()``; otherwise it falls back to ``torch_native`` attention, with
   which 0.5.23 supports neither speculative decoding ("EAGLE is not supported in decode attention
   backend torch_native") nor the CPU graph. This kernel build holds no AMX instruction (its matrix
   products go through torch's oneDNN brgemm, which picks AVX-512 code at run time), so the shim
   tells SGLang AMX is there, and says so on stderr.

Set ``SGLPERF_CPU_SHIM=0`` to turn all three off (and see SGLang's own errors).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

MISSING_OPS = {
    "fused_dual_residual_rmsnorm_cpu": (
        "(Tensor x, Tensor residual, Tensor w1, Tensor w2, float eps) -> (Tensor, Tensor)"
    ),
    "fused_moe_router_cpu": (
        "(float moe_softcapping, Tensor hidden_states, Tensor gating_output, int topk, "
        "bool renormalize, Tensor? correction_bias=None) -> (Tensor, Tensor)"
    ),
    "fp8_per_tensor_scaled_mm_cpu": (
        "(Tensor mat1, Tensor mat2, Tensor scale2, Tensor? bias, ScalarType out_dtype, bool is_vnni) -> Tensor"
    ),
}
_KEEP: list[Any] = []  # torch.library.Library objects must live as long as the process


def define_missing_ops(_module: ModuleType) -> None:
    import torch

    library = torch.library.Library("sgl_kernel", "FRAGMENT")
    for name, schema in MISSING_OPS.items():
        if hasattr(torch.ops.sgl_kernel, name):
            continue
        library.define(name + schema)

        def missing(*args: Any, _name: str = name, **kwargs: Any) -> Any:
            raise RuntimeError(f"sgl_kernel::{_name} is not in this CPU kernel build (sglperf CPU shim)")

        library.impl(name, missing, "CPU")
    _KEEP.append(library)


def patch_qwen3_5(module: ModuleType) -> None:
    op = getattr(module, "_fused_sigmoid_mul_cpu", None)
    if op is None or getattr(op, "_sglperf_patched", False):
        return

    def fused_sigmoid_mul_cpu(x: Any, gate: Any) -> Any:
        return op(x, gate, True)

    fused_sigmoid_mul_cpu._sglperf_patched = True  # type: ignore[attr-defined]
    module._fused_sigmoid_mul_cpu = fused_sigmoid_mul_cpu  # type: ignore[attr-defined]


AMX_NOTE = (
    "sglperf CPU shim: this CPU has no AMX; SGLang's intel_amx CPU path is taken anyway (the CPU kernel "
    "holds no AMX instruction; oneDNN picks AVX-512 code)"
)


def assume_amx(module: ModuleType) -> None:
    if getattr(module, "is_amx_tile_supported", True):
        return
    module.is_amx_tile_supported = True  # type: ignore[attr-defined]
    if os.environ.get("SGLPERF_CPU_SHIM_QUIET") != "1":
        os.environ["SGLPERF_CPU_SHIM_QUIET"] = "1"  # once per server: its spawned processes inherit it
        print(AMX_NOTE, file=sys.stderr)


HOOKS: dict[str, Callable[[ModuleType], None]] = {
    "sgl_kernel": define_missing_ops,
    "sglang.srt.models.qwen3_5": patch_qwen3_5,
    "sglang.srt.utils.common": assume_amx,
}


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a hook right after a module's own code ran, once per module."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        hook = HOOKS.get(fullname)
        if hook is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader: Any = spec.loader
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            try:
                hook(module)
            except Exception as exc:  # never break SGLang's own import; say why
                print(f"sglperf CPU shim: {fullname}: {type(exc).__name__}: {exc}", file=sys.stderr)

        loader.exec_module = exec_module
        return spec


def install() -> None:
    if os.environ.get("SGLPERF_CPU_SHIM", "1") != "0" and not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())


if __name__ == "sglperf_cpu_shim":  # as installed; imported from the sglperf package (tests), it hooks nothing
    install()
