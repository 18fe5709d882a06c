"""str_replace_editor on real files: every command, and every bad input as a clear observation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from snaffle.exceptions import ToolFailure
from snaffle.primitives.editor import Editor
from snaffle.workspace import Workspace
from tests.helpers import make_repo


@pytest.fixture
def editor(tmp_path: Path) -> Editor:
    files: dict[str, str | bytes] = {
        "pkg/mod.py": "def f():\n    return 1\n\n\ndef g():\n    return 1\n",
        "pkg/data.bin": b"\x00\x01\x02binary",
        "pkg/latin1.py": "x = 'caf\xe9'\n".encode("latin-1"),
        "big.txt": "line\n" * 5000,
    }
    repo = make_repo(tmp_path / "repo", files)
    return Editor(Workspace.open(repo))


def read(editor: Editor, path: str) -> str:
    return (editor.workspace.root / path).read_text()


def test_view_numbers_lines_and_honours_range(editor: Editor) -> None:
    out = editor.str_replace_editor("view", "pkg/mod.py", view_range=[5, -1])
    assert out.splitlines() == ["     5\tdef g():", "     6\t    return 1"]
    assert "pkg/mod.py" in editor.str_replace_editor("view", ".")


def test_view_of_a_huge_file_is_cut_with_a_marker(editor: Editor) -> None:
    out = editor.str_replace_editor("view", "big.txt")
    assert len(out) < 8_200 and "characters cut" in out


def test_str_replace_must_match_exactly_once(editor: Editor) -> None:
    with pytest.raises(ToolFailure, match=r"occurs 2 times .*lines 2, 6"):
        editor.str_replace_editor("str_replace", "pkg/mod.py", old_str="return 1", new_str="return 2")
    with pytest.raises(ToolFailure, match="whitespace is ignored"):
        editor.str_replace_editor("str_replace", "pkg/mod.py", old_str="def f():\nreturn 1", new_str="")
    out = editor.str_replace_editor(
        "str_replace", "pkg/mod.py", old_str="def g():\n    return 1", new_str="def g():\n    return 2"
    )
    assert "return 2" in out and read(editor, "pkg/mod.py").endswith("return 2\n")


def test_insert_create_and_undo(editor: Editor) -> None:
    original = read(editor, "pkg/mod.py")
    editor.str_replace_editor("insert", "pkg/mod.py", insert_line=0, new_str="import os")
    assert read(editor, "pkg/mod.py").startswith("import os\ndef f")
    editor.str_replace_editor("undo_edit", "pkg/mod.py")
    assert read(editor, "pkg/mod.py") == original
    editor.str_replace_editor("create", "pkg/new.py", file_text="x = 1\n")
    with pytest.raises(ToolFailure, match="already exists"):
        editor.str_replace_editor("create", "pkg/new.py", file_text="y = 2\n")
    editor.str_replace_editor("undo_edit", "pkg/new.py")
    assert not (editor.workspace.root / "pkg/new.py").exists()
    with pytest.raises(ToolFailure, match="no edit"):
        editor.str_replace_editor("undo_edit", "pkg/mod.py")
    with pytest.raises(ToolFailure, match="outside the file"):
        editor.str_replace_editor("insert", "pkg/mod.py", insert_line=99, new_str="x")


@pytest.mark.parametrize("path", ["../outside.py", "/etc/passwd", "pkg/../../x"])
def test_paths_escaping_the_repo_are_refused(editor: Editor, path: str) -> None:
    with pytest.raises(ToolFailure, match="outside the repository"):
        editor.str_replace_editor("view", path)


def test_symlink_escape_is_refused(editor: Editor, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    os.symlink(secret, editor.workspace.root / "link.txt")
    with pytest.raises(ToolFailure, match="outside the repository"):
        editor.str_replace_editor("view", "link.txt")
    with pytest.raises(ToolFailure, match="outside the repository"):
        editor.str_replace_editor("create", "link.txt/../../x.py", file_text="x")


def test_binary_and_non_utf8_files(editor: Editor) -> None:
    with pytest.raises(ToolFailure, match="binary file"):
        editor.str_replace_editor("view", "pkg/data.bin")
    shown = editor.str_replace_editor("view", "pkg/latin1.py")
    assert "not valid UTF-8" in shown and "caf" in shown
    before = (editor.workspace.root / "pkg/latin1.py").read_bytes()
    with pytest.raises(ToolFailure, match="not valid UTF-8"):
        editor.str_replace_editor("str_replace", "pkg/latin1.py", old_str="x", new_str="y")
    assert (editor.workspace.root / "pkg/latin1.py").read_bytes() == before


def test_missing_arguments_and_files(editor: Editor) -> None:
    with pytest.raises(ToolFailure, match="needs the argument old_str"):
        editor.str_replace_editor("str_replace", "pkg/mod.py")
    with pytest.raises(ToolFailure, match="does not exist"):
        editor.str_replace_editor("view", "pkg/none.py")
    with pytest.raises(ToolFailure, match="view_range"):
        editor.str_replace_editor("view", "pkg/mod.py", view_range=[3])
