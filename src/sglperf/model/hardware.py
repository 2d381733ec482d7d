"""GPU memory bandwidth by name, for the decode roofline (`sglperf.baselines.roofline`).

Figures are the vendor's peak memory bandwidth per GPU in GB/s (10**9 bytes per second), from
NVIDIA's product datasheets and spec pages (cited per row). A runner profile's
``memory_bandwidth_gbs`` overrides the table (a GPU not listed, a board clocked differently).
Names are matched as ``nvidia-smi`` and torch report them ("NVIDIA A100-SXM4-80GB", "NVIDIA
GeForce RTX 4090"), case-insensitively; the most specific rule comes first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# (rule over the normalised name: every word must be present and none of the excluded ones, GB/s, source)
_TABLE: tuple[tuple[tuple[str, ...], tuple[str, ...], float, str], ...] = (
    # NVIDIA H100 Tensor Core GPU datasheet: SXM 3.35 TB/s, PCIe 2 TB/s, NVL 3.9 TB/s
    (("h100", "pcie"), (), 2000.0, "NVIDIA H100 datasheet (PCIe: 2 TB/s)"),
    (("h100", "nvl"), (), 3900.0, "NVIDIA H100 datasheet (NVL: 3.9 TB/s)"),
    (("h100",), ("gh100",), 3350.0, "NVIDIA H100 datasheet (SXM: 3.35 TB/s)"),
    # NVIDIA H200 datasheet: 4.8 TB/s (SXM and NVL)
    (("gh200",), (), 4000.0, "NVIDIA GH200 datasheet (96 GB HBM3: 4 TB/s)"),
    (("h200",), (), 4800.0, "NVIDIA H200 datasheet (4.8 TB/s)"),
    # NVIDIA DGX B200 / HGX B200 spec: 8 TB/s per GPU
    (("b200",), ("gb200",), 8000.0, "NVIDIA HGX B200 spec (8 TB/s per GPU)"),
    # NVIDIA A100 datasheet: 40 GB 1,555 GB/s; 80 GB PCIe 1,935 GB/s; 80 GB SXM 2,039 GB/s
    (("a100", "80gb", "pcie"), (), 1935.0, "NVIDIA A100 datasheet (80 GB PCIe: 1,935 GB/s)"),
    (("a100", "80gb"), (), 2039.0, "NVIDIA A100 datasheet (80 GB SXM: 2,039 GB/s)"),
    (("a100",), (), 1555.0, "NVIDIA A100 datasheet (40 GB: 1,555 GB/s)"),
    # NVIDIA L40S datasheet 864 GB/s; L40 datasheet 864 GB/s; L4 datasheet 300 GB/s
    (("l40s",), (), 864.0, "NVIDIA L40S datasheet (864 GB/s)"),
    (("l40",), (), 864.0, "NVIDIA L40 datasheet (864 GB/s)"),
    (("l4",), (), 300.0, "NVIDIA L4 datasheet (300 GB/s)"),
    # NVIDIA RTX A6000 datasheet 768 GB/s; RTX 6000 Ada datasheet 960 GB/s; RTX PRO 6000 Blackwell 1,792 GB/s
    (("rtx", "pro", "6000"), (), 1792.0, "NVIDIA RTX PRO 6000 Blackwell datasheet (1,792 GB/s)"),
    (("rtx", "6000", "ada"), (), 960.0, "NVIDIA RTX 6000 Ada datasheet (960 GB/s)"),
    (("rtx", "a6000"), (), 768.0, "NVIDIA RTX A6000 datasheet (768 GB/s)"),
    (("rtx", "a5000"), (), 768.0, "NVIDIA RTX A5000 datasheet (768 GB/s)"),
    # NVIDIA A40 datasheet 696 GB/s; A30 datasheet 933 GB/s; A10 datasheet 600 GB/s (A10G: same memory system)
    (("a40",), (), 696.0, "NVIDIA A40 datasheet (696 GB/s)"),
    (("a30",), (), 933.0, "NVIDIA A30 datasheet (933 GB/s)"),
    (("a10g",), (), 600.0, "NVIDIA A10G (AWS G5; A10 memory system, 600 GB/s)"),
    (("a10",), (), 600.0, "NVIDIA A10 datasheet (600 GB/s)"),
    # GeForce spec pages: RTX 5090 1,792 GB/s; 4090 1,008 GB/s; 3090 Ti 1,008 GB/s; 3090 936 GB/s
    (("rtx", "5090"), (), 1792.0, "NVIDIA GeForce RTX 5090 specifications (1,792 GB/s)"),
    (("rtx", "4090"), (), 1008.0, "NVIDIA GeForce RTX 4090 specifications (1,008 GB/s)"),
    (("rtx", "3090", "ti"), (), 1008.0, "NVIDIA GeForce RTX 3090 Ti specifications (1,008 GB/s)"),
    (("rtx", "3090"), (), 936.0, "NVIDIA GeForce RTX 3090 specifications (936 GB/s)"),
    # NVIDIA V100 datasheet 900 GB/s (SXM2 and PCIe); T4 datasheet 320 GB/s
    (("v100",), (), 900.0, "NVIDIA V100 datasheet (900 GB/s)"),
    (("t4",), (), 320.0, "NVIDIA T4 datasheet (320 GB/s)"),
)


@dataclass(frozen=True)
class Bandwidth:
    gbs: float  # GB/s, 10**9 bytes per second
    source: str


def _words(name: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", name.lower())) - {""}


def vendor_bandwidth(gpu_name: str) -> Bandwidth | None:
    """The vendor's memory bandwidth for a GPU name, or None when the table does not know it."""
    words = _words(gpu_name)
    for needed, excluded, gbs, source in _TABLE:
        if set(needed) <= words and not set(excluded) & words:
            return Bandwidth(gbs, source)
    return None


def memory_bandwidth(gpu_name: str, override_gbs: float | None = None) -> Bandwidth | None:
    """The runner profile's ``memory_bandwidth_gbs`` if set, else the vendor figure for ``gpu_name``."""
    if override_gbs is not None:
        return Bandwidth(float(override_gbs), "runner profile memory_bandwidth_gbs")
    return vendor_bandwidth(gpu_name)
