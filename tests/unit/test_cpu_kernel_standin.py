"""The stand-in ``sgl_kernel`` of the torch-native CPU environments: imports succeed, calls fail by name."""

from __future__ import annotations

import pytest

from sglperf.sglang import cpu_kernel_standin


def test_any_op_can_be_imported_and_fails_naming_itself_when_called() -> None:
    from sglperf.sglang.cpu_kernel_standin import copy_all_layer_kv_cache_cpu

    with pytest.raises(cpu_kernel_standin.StandInKernelError, match=r"sgl_kernel\.copy_all_layer_kv_cache_cpu was"):
        copy_all_layer_kv_cache_cpu(1, 2, key=3)
    assert copy_all_layer_kv_cache_cpu.__name__ == "copy_all_layer_kv_cache_cpu"


def test_dunders_are_not_there_so_import_machinery_and_pickle_see_a_plain_module() -> None:
    with pytest.raises(AttributeError):
        cpu_kernel_standin.__wrapped__  # noqa: B018
    assert cpu_kernel_standin.STANDIN is True
