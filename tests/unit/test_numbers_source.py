"""Whose numbers: one decision, and the words each surface has always printed for it."""

from __future__ import annotations

from sglperf.model.numbers_source import NumbersSource

from ..support.history import measurement


def test_one_decision_for_a_record_a_server_and_a_flag() -> None:
    assert NumbersSource.of(emulated=True, gpu_count=0, device="cpu") is NumbersSource.EMULATOR
    assert NumbersSource.of(emulated=False, gpu_count=0) is NumbersSource.CPU_SERVER
    assert NumbersSource.of(emulated=False, device="cpu") is NumbersSource.CPU_SERVER
    assert NumbersSource.of(emulated=False, gpu_count=2, device="cuda") is NumbersSource.GPU
    assert NumbersSource.of(emulated=False) is NumbersSource.GPU  # a flag alone: not the emulator's
    record = measurement(None, 70.0)  # no GPU in its provenance: a CPU server's
    assert record.numbers_source is NumbersSource.CPU_SERVER
    on_gpus = record.provenance.model_copy(update={"gpu_count": 2})
    assert record.model_copy(update={"provenance": on_gpus}).numbers_source is NumbersSource.GPU
    # Either flag says emulator: a record whose two flags disagree is never shown as a GPU's.
    assert record.model_copy(update={"emulated": True}).numbers_source is NumbersSource.EMULATOR
    emulated = on_gpus.model_copy(update={"emulated": True})
    assert record.model_copy(update={"provenance": emulated}).numbers_source is NumbersSource.EMULATOR


def test_several_records_are_the_emulators_when_any_is_and_a_cpus_when_all_are() -> None:
    cpu, gpu, emulator = NumbersSource.CPU_SERVER, NumbersSource.GPU, NumbersSource.EMULATOR
    assert NumbersSource.of_all([gpu, emulator, cpu]) is emulator
    assert NumbersSource.of_all([cpu, cpu]) is cpu
    assert NumbersSource.of_all([cpu, gpu]) is gpu
    assert NumbersSource.of_all([]) is gpu


def test_each_surface_keeps_its_words() -> None:
    emulator, cpu, gpu = (s.words for s in (NumbersSource.EMULATOR, NumbersSource.CPU_SERVER, NumbersSource.GPU))
    assert emulator.caption == " (EMULATOR: a test double, not GPU results)"
    assert emulator.item_section == " (EMULATOR, not GPU results)"
    assert emulator.figure_line == "\n[EMULATOR: test double, not GPU results]"
    assert emulator.banner.startswith("> Live numbers below come from the **SGLang emulator, a test double**")
    assert (emulator.tag, emulator.flag) == (" [EMULATOR]", " emulator")
    assert cpu.caption == " (CPU server: CPU numbers, not GPU results)"
    assert cpu.note == "CPU server (device cpu): CPU numbers, not GPU results"
    # A CPU server is named only where it always was; GPUs' numbers need no words.
    assert (cpu.item_section, cpu.figure_line, cpu.banner, cpu.tag, cpu.flag) == ("",) * 5
    assert gpu == type(gpu)()
