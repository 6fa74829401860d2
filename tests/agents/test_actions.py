"""Action parsing: the three action kinds, the accepted edit layouts, and every format error."""

from __future__ import annotations

import pytest

from agents.actions import Command, Edit, FormatError, Submit, find_actions, parse_action

EDIT_BODY = "<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b\n>>>>>>> REPLACE"
EXPECTED_EDIT = Edit("pkg/calc.py", "    return a - b\n", "    return a + b\n")


def test_command_is_the_stripped_block_content():
    text = "I will look around.\n\n```bash\n  ls -la\n  grep -n x y.py\n```\nThat is all."
    assert parse_action(text) == Command("ls -la\n  grep -n x y.py")


@pytest.mark.parametrize("fence", ["```bash", "```sh", "```shell", "  ```bash  "])
def test_shell_fence_spellings(fence):
    assert parse_action(f"thought\n{fence}\necho hi\n```") == Command("echo hi")


def test_submit_is_a_block_holding_only_submit():
    assert parse_action("Done.\n```bash\n submit \n```") == Submit()
    # anything else with it is an ordinary command
    assert parse_action("```bash\ngit diff\nsubmit\n```") == Command("git diff\nsubmit")


@pytest.mark.parametrize(
    "text",
    [
        f"Fix the sign.\npkg/calc.py\n{EDIT_BODY}\n",  # bare
        f"Fix the sign.\n```\npkg/calc.py\n{EDIT_BODY}\n```\n",  # inside a plain fence
        f"Fix the sign.\n```python\npkg/calc.py\n{EDIT_BODY}\n```\n",  # inside a language fence
        f"Fix the sign.\npkg/calc.py\n```python\n{EDIT_BODY}\n```\n",  # path just above the fence
        f"Fix the sign.\n`pkg/calc.py`\n{EDIT_BODY}\n",  # path in backticks
    ],
    ids=["bare", "plain-fence", "python-fence", "path-above-fence", "backticks"],
)
def test_edit_layouts(text):
    assert parse_action(text) == EXPECTED_EDIT


def test_edit_keeps_exact_lines_and_allows_empty_parts():
    text = "new.txt\n<<<<<<< SEARCH\n=======\n  indented\n\nlast\t\n>>>>>>> REPLACE"
    assert parse_action(text) == Edit("new.txt", "", "  indented\n\nlast\t\n")
    delete = "a.py\n<<<<<<< SEARCH\nx = 1\n=======\n>>>>>>> REPLACE"
    assert parse_action(delete) == Edit("a.py", "x = 1\n", "")


def test_edit_may_contain_fences_and_bash_text():
    text = "README.md\n<<<<<<< SEARCH\n```bash\nmake\n```\n=======\n```bash\nmake all\n```\n>>>>>>> REPLACE\n"
    assert parse_action(text) == Edit("README.md", "```bash\nmake\n```\n", "```bash\nmake all\n```\n")


def test_prose_code_fences_are_not_actions():
    text = "The error says:\n```\nTraceback ...\n```\nand the code is\n```python\nx = 1\n```\n```bash\nls\n```"
    assert parse_action(text) == Command("ls")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("I think the bug is in parse().", "no action"),
        ("```python\nprint(1)\n```", "no action"),
        ("```bash\nls\n```\n```bash\ncat a.py\n```", "2 actions"),
        (f"```bash\nls\n```\npkg/calc.py\n{EDIT_BODY}", "2 actions"),
        (f"a.py\n{EDIT_BODY}\nb.py\n{EDIT_BODY}", "2 actions"),
        (f"```\na.py\n{EDIT_BODY}\nb.py\n{EDIT_BODY}\n```", "2 actions"),
        ("```bash\nls -la", "not closed"),
        ("```bash\n\n```", "empty"),
        (f"\n{EDIT_BODY}", "file path"),
        (EDIT_BODY, "file path"),
        ("a.py\n<<<<<<< SEARCH\nx = 1\n>>>>>>> REPLACE", "======="),
        ("a.py\n<<<<<<< SEARCH\nx = 1\n", "======="),
        ("a.py\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n", ">>>>>>> REPLACE"),
    ],
    ids=[
        "prose",
        "python-only",
        "two-bash",
        "bash-and-edit",
        "two-edits",
        "two-edits-in-fence",
        "unclosed",
        "empty-bash",
        "no-path",
        "no-path-at-start",
        "no-divider",
        "truncated-search",
        "no-replace-marker",
    ],
)
def test_format_errors(text, expected):
    with pytest.raises(FormatError, match=expected):
        parse_action(text)


def test_find_actions_lists_them_in_order():
    text = f"```bash\nls\n```\npkg/calc.py\n{EDIT_BODY}\n```bash\nsubmit\n```"
    assert find_actions(text) == [Command("ls"), EXPECTED_EDIT, Submit()]


def test_to_dict_is_json_ready():
    assert EXPECTED_EDIT.to_dict() == {
        "kind": "edit",
        "path": "pkg/calc.py",
        "search": "    return a - b\n",
        "replace": "    return a + b\n",
    }
    assert Command("ls").to_dict() == {"kind": "command", "command": "ls"}
    assert Submit().to_dict() == {"kind": "submit"}
