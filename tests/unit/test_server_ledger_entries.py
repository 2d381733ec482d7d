"""The shared-memory ledger's entries: which paths it may ever remove, and entries it cannot read are
named and left as they are (sweeps around real processes: tests/integration/test_server_ledger.py)."""

from __future__ import annotations

import json
import os

import pytest

from sglperf.runtime import server_ledger

pytestmark = [
    pytest.mark.skipif(not os.path.isdir(server_ledger.SHARED_MEMORY_DIR), reason="no /dev/shm here"),
    pytest.mark.usefixtures("own_sglperf_home"),
]


def test_an_unreadable_entry_is_named_and_left_with_its_files(shm_file: str) -> None:
    folder = server_ledger.ledger_dir()
    folder.mkdir(parents=True)
    bad = folder / "123-456.json"
    bad.write_text(json.dumps({"pid": 1, "create_time": 0, "name": "x", "paths": [shm_file, "/etc/passwd"]}))
    messages: list[str] = []
    assert server_ledger.sweep(messages.append) == []
    assert bad.is_file() and os.path.exists(shm_file)
    assert messages == [
        f"shared-memory ledger {bad}: unreadable (paths: expected a list of files directly in /dev/shm); "
        "left as it is, remove it by hand"
    ]


@pytest.mark.parametrize(
    ("path", "admitted"),
    [
        ("/dev/shm/deepspeed_allreduce_buffer_0_127.0.0.1_25000_0", True),
        ("/dev/shm/./x", True),
        ("/dev/shm/../etc/passwd", False),
        ("/dev/shm/sub/x", False),
        ("/dev/shm/", False),
        ("dev/shm/x", False),
        ("/tmp/x", False),
    ],
)
def test_only_a_file_directly_in_dev_shm_may_ever_be_removed(path: str, admitted: bool) -> None:
    assert server_ledger.in_shared_memory(path) is admitted


@pytest.mark.parametrize("descendants", [[[1, 0.0]], [[0, 5.0]], ["x"], [[12, "soon"]], 7])
def test_descendants_that_are_not_user_process_pairs_make_the_entry_unreadable(descendants: object) -> None:
    folder = server_ledger.ledger_dir()
    folder.mkdir(parents=True)
    bad = folder / "123-456.json"
    bad.write_text(json.dumps({"pid": 123, "create_time": 0, "name": "x", "paths": [], "descendants": descendants}))
    with pytest.raises(server_ledger.LedgerError, match="unreadable"):
        server_ledger.read_entry(bad)
    assert server_ledger.sweep() == [] and bad.is_file()
