"""A stand-in for SGLang's kernel package with no native code, installed as ``sgl_kernel`` into sglperf's
torch-native SGLang-on-CPU environments (``sglperf env build VERSION --cpu torch-native``; sglperf itself
never imports it under that name).

SGLang imports ``sgl_kernel`` names at module level on every path, the CPU one included, so without a
package of that name ``sglang.launch_server`` stops at import. With this one the imports succeed and SGLang's
own rules do the rest: ``cpu_has_amx_support()`` is false because ``torch.ops.sgl_kernel`` holds no
``convert_weight_packed``, so the server resolves ``attention_backend`` to ``torch_native`` ("The current
platform does not support Intel AMX, will fallback to torch_native backend") and its layers run their torch
code. Seen on SGLang 0.5.23 serving a tiny Qwen3 with no op of this package called.

Every name is a function that raises when called, naming itself: a release whose CPU path really needs
a native op fails with that op's name, never with a silent wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

STANDIN = True  # how a test (or a curious user) tells this package from the real kernel


class StandInKernelError(RuntimeError):
    """SGLang called a kernel op that only the native package has."""


def __getattr__(name: str) -> Callable[..., Any]:
    if name.startswith("__"):  # importlib and pickle ask for dunders: the answer is "not here"
        raise AttributeError(name)

    def op(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise StandInKernelError(
            f"sgl_kernel.{name} was called, but this environment has no native SGLang kernel (sglperf's "
            'torch-native stand-in): this SGLang path needs the CPU kernel (cpu_kernel = "sgl-kernel", AVX-512)'
        )

    op.__name__ = op.__qualname__ = name
    return op
