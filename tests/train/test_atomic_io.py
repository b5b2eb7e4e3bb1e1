"""Atomic writes leave the permissions a plain ``open(path, "w")`` would: 0o666 & ~umask for a new file,
the file's own mode when replacing one; and a failed write leaves the old file and no temp file."""

import os
import stat

import pytest

from trace_envs.atomic_io import write_bytes_atomic, write_text_atomic
from trace_train.trajectory import TrajectoryRecord, drop_rows_from, write_json_atomic, write_trajectories


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(params=[0o022, 0o077, 0o002])
def umask(request):
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _plain_mode(tmp_path) -> int:
    with open(tmp_path / "plain.txt", "w") as fh:
        fh.write("x")
    return _mode(tmp_path / "plain.txt")


def test_new_file_gets_the_mode_a_plain_write_gives(tmp_path, umask):
    expected = 0o666 & ~umask
    assert _plain_mode(tmp_path) == expected
    write_text_atomic(tmp_path / "a.txt", "hello")
    write_bytes_atomic(tmp_path / "b.bin", b"\x00\x01")
    write_json_atomic(tmp_path / "c.json", {"a": 1})
    record = TrajectoryRecord(env_id="e", seed=1, messages=[], reward=1.0, success=True, termination="done")
    write_trajectories(tmp_path / "sub" / "d.jsonl", [record])
    for name in ("a.txt", "b.bin", "c.json", "sub/d.jsonl"):
        assert _mode(tmp_path / name) == expected, (name, oct(_mode(tmp_path / name)), oct(expected))
    assert (tmp_path / "a.txt").read_text() == "hello" and (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]  # no temp file left behind


@pytest.mark.parametrize("existing", [0o640, 0o604, 0o600, 0o664])
def test_replaced_file_keeps_its_mode(tmp_path, umask, existing):
    path = tmp_path / "m.jsonl"
    path.write_text('{"iteration": 0}\n{"iteration": 1}\n')
    os.chmod(path, existing)
    write_text_atomic(path, '{"iteration": 0}\n')
    assert _mode(path) == existing
    drop_rows_from(path, "iteration", 0)  # the resume path rewrites logs through the same atomic write
    assert _mode(path) == existing and path.read_text() == ""


def test_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "a.txt"
    write_text_atomic(path, "old")
    with pytest.raises(UnicodeEncodeError):
        write_text_atomic(path, "new \ud800")  # raw text (not JSON) that UTF-8 cannot encode
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def _files(folder):
    return {p.name: p.read_text() for p in folder.iterdir()}


def test_publish_dir_replaces_a_folder_whole_and_a_kill_never_loses_both(tmp_path, monkeypatch):
    """The old folder stays whole until the new one is in place: a kill while the old one is being removed (once
    the new one is published) or between the renames leaves one of them complete."""
    import os

    import trace_envs.atomic_io as aio

    final = tmp_path / "adapter"

    def writer(tag):
        def write(tmp):
            for name in ("adapter_model.safetensors", "adapter_config.json"):
                (tmp / name).write_text(f"{tag} {name}")
        return write

    aio.publish_dir(final, writer("v1"))
    aio.publish_dir(final, writer("v2"))
    assert _files(final) == {"adapter_model.safetensors": "v2 adapter_model.safetensors",
                             "adapter_config.json": "v2 adapter_config.json"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]  # nothing left beside it

    real_rmtree = aio.shutil.rmtree

    def killed_rmtree(path, *args, **kwargs):  # dies half-way through removing a folder holding v2's files
        path = type(final)(path)
        if (path / "adapter_config.json").exists() and "v2" in (path / "adapter_config.json").read_text():
            (path / "adapter_config.json").unlink()
            raise KeyboardInterrupt("killed mid-rmtree")
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(aio.shutil, "rmtree", killed_rmtree)
    with pytest.raises(KeyboardInterrupt):
        aio.publish_dir(final, writer("v3"))
    assert _files(final)["adapter_config.json"] == "v3 adapter_config.json"  # the new one is whole
    monkeypatch.setattr(aio.shutil, "rmtree", real_rmtree)

    real_replace = os.replace
    interrupted = []

    def killed_second_rename(src, dst):  # interrupted once, as the new folder is renamed in
        if type(final)(dst) == final and not interrupted:
            interrupted.append(dst)
            raise KeyboardInterrupt("killed between the renames")
        return real_replace(src, dst)

    monkeypatch.setattr(aio.os, "replace", killed_second_rename)
    with pytest.raises(KeyboardInterrupt):
        aio.publish_dir(final, writer("v4"))
    monkeypatch.setattr(aio.os, "replace", real_replace)
    assert _files(final)["adapter_config.json"] == "v3 adapter_config.json"  # put back: the old one whole
    aio.publish_dir(final, writer("v5"))  # the next publish clears what the killed ones left
    assert _files(final)["adapter_config.json"] == "v5 adapter_config.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter"]
