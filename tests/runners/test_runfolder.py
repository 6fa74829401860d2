"""Overwriting a run folder removes what a run wrote there, and only that."""

from __future__ import annotations

from runners.runfolder import remove_run


def test_overwriting_a_run_folder_removes_the_temp_file_a_killed_write_left(tmp_path):
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / ".summary.json.4242.tmp").write_text("{half")  # what atomic_path leaves if SIGKILL lands mid-write
    (tmp_path / "notes.txt").write_text("the user's own file")
    remove_run(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
