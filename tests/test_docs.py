"""Every Python example in the documentation runs, and prints what the page says it prints.

The pages are the Markdown files of the site (``docs/**/*.md``) and the README. Each
```` ```python ```` block runs alone, in a namespace of its own, as a reader would paste it into
a fresh interpreter: it makes its own imports and whatever it uses. Conventions, written next to
the block on the page:

* a ```` ```text ```` block right after a Python block (only blank lines between) is what that
  block prints, compared exactly (trailing spaces aside);
* ``<!-- output -->`` ... ``<!-- /output -->`` right after a Python block holds what it prints as
  Markdown -- tables generated from the real wheel on "How it works", rendered by the site;
* ``<!-- not run: reason -->`` right before a Python block skips it, for a reason the page
  states (a cluster, a broker); the block must still compile;
* ``<!-- continues -->`` right before a Python block runs it in what the block before it left,
  for a walkthrough whose steps build on one another ("How it works"); the page says so where
  a reader sees it.

Time is virtual: while the blocks run, ``asyncio.run`` is :func:`aiowheel.testing.run` (a loop
whose clock jumps to the next timer) and ``trio.run`` gets ``MockClock(autojump_threshold=0)``,
so an example that waits an hour takes milliseconds and the times it prints are exact. Blocks on
the wheel-backed loop (``asyncio.Runner(loop_factory=aiowheel.loop.new_event_loop)``) run in
real time and keep their waits short.

A failure names the page, the block's line and what went wrong. The docstring examples shown in
the API reference run here too, with :mod:`doctest`.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import doctest
import io
import re
import traceback
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import CodeType
from typing import Any, TypeVar

import pytest
from markdown_it import MarkdownIt

import aiowheel
import aiowheel.testing

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
# Pages whose Python blocks are whole pytest files, run by the test of what they document.
RUN_ELSEWHERE = {
    DOCS / "testing.md": "tests/test_pytest_plugin.py runs each section as a pytester project",
}
PAGES = sorted(
    [
        ROOT / "README.md",
        *(p for p in DOCS.rglob("*.md") if "_build" not in p.parts and p not in RUN_ELSEWHERE),
    ],
)
PYTHON = {"python", "py", "python3"}

_NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>.*?)\s*-->\s*$", re.DOTALL)
_OUTPUT_OPEN = re.compile(r"<!--\s*output\s*-->\s*$")
_OUTPUT_CLOSE = re.compile(r"<!--\s*/output\s*-->\s*$")
_CONTINUES = re.compile(r"<!--\s*continues\s*-->\s*$")
_MARKER = re.compile(r"<!--\s*(not run|output|/output|continues)\b")


@dataclass
class Block:
    """One Python code block of a page and what the page says about it."""

    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    expected: str | None  # what it prints, if the page says
    not_run: str | None  # the reason it is not run, if it is not
    continues: bool = False  # runs in what the block before it left


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def _blank(lines: list[str], start: int, stop: int) -> bool:
    return all(not line.strip() for line in lines[start:stop])


def parse(page: Path) -> list[Block]:
    """The Python blocks of ``page`` with their expected output and not-run reasons."""
    source = page.read_text(encoding="utf-8")
    lines = source.splitlines()
    tokens = [
        t
        for t in MarkdownIt("commonmark").enable("table").parse(source)
        if t.type in {"fence", "html_block"} and t.map is not None
    ]
    blocks: list[Block] = []
    used: set[int] = set()  # indices of marker and output tokens claimed by a block
    for index, token in enumerate(tokens):
        if token.type != "fence" or token.info.split()[:1] not in ([p] for p in PYTHON):
            continue
        assert token.map is not None
        start, end = token.map
        block = Block(page, start + 1, token.content, None, None)
        before = tokens[index - 1] if index > 0 else None
        if before is not None and before.type == "html_block" and before.map is not None:
            match = _NOT_RUN.match(before.content.strip())
            if match and _blank(lines, before.map[1], start):
                reason = match.group("reason")
                assert reason, f"{_name(page)}:{before.map[0] + 1}: 'not run' needs a reason"
                block.not_run = reason
                used.add(index - 1)
            elif _CONTINUES.match(before.content.strip()) and _blank(lines, before.map[1], start):
                assert blocks, f"{_name(page)}:{before.map[0] + 1}: no block before to continue"
                block.continues = True
                used.add(index - 1)
        after = tokens[index + 1] if index + 1 < len(tokens) else None
        if after is not None and after.map is not None and _blank(lines, end, after.map[0]):
            if after.type == "fence" and after.info.strip() == "text":
                block.expected = after.content
            elif after.type == "html_block" and _OUTPUT_OPEN.match(after.content.strip()):
                close = next(
                    (
                        t
                        for t in tokens[index + 2 :]
                        if t.type == "html_block" and _OUTPUT_CLOSE.match(t.content.strip())
                    ),
                    None,
                )
                assert close is not None and close.map is not None, (
                    f"{_name(page)}:{after.map[0] + 1}: <!-- output --> is never closed"
                )
                block.expected = "\n".join(lines[after.map[1] : close.map[0]])
                used.update({index + 1, tokens.index(close)})
        blocks.append(block)
    for index, token in enumerate(tokens):
        if token.type == "html_block" and _MARKER.match(token.content) and index not in used:
            assert token.map is not None
            raise AssertionError(
                f"{_name(page)}:{token.map[0] + 1}: {token.content.strip()!r} belongs right "
                "before (not run) or right after (output) a ```python block"
            )
    return blocks


def _normalise(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def _virtual_asyncio_run(
    main: Coroutine[Any, Any, T], *, debug: bool | None = None, **kwargs: Any
) -> T:
    """``asyncio.run`` for the examples: the same, on a loop in virtual time."""
    if kwargs:  # a loop_factory of the example's own: respect it
        main.close()
        raise AssertionError(f"an example passed {sorted(kwargs)} to asyncio.run")
    return aiowheel.testing.run(main, debug=debug)


@contextlib.contextmanager
def _virtual_time() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(asyncio, "run", _virtual_asyncio_run)
        try:
            import trio
            import trio.testing
        except ImportError:  # pragma: no cover - trio is in the dev extra
            pass
        else:
            real_trio_run = trio.run

            def trio_run(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
                kwargs.setdefault("clock", trio.testing.MockClock(autojump_threshold=0))
                return real_trio_run(fn, *args, **kwargs)

            patch.setattr(trio, "run", trio_run)
        yield


def _compile(block: Block, where: str) -> CodeType:
    # Padded so that tracebacks and syntax errors give the page's own line numbers.
    try:
        return compile("\n" * block.line + block.code, str(block.page), "exec")
    except SyntaxError as exc:
        message = str(exc)
    pytest.fail(f"{where} does not compile: {message}", pytrace=False)


def _run(code: CodeType, namespace: dict[str, Any], where: str) -> str:
    """Run ``code`` in virtual time; return what it printed."""
    out = io.StringIO()
    try:
        with _virtual_time(), contextlib.redirect_stdout(out):
            exec(code, namespace)
    except BaseException:
        failure = traceback.format_exc()
    else:
        return out.getvalue()
    pytest.fail(f"{where} raised:\n{failure}", pytrace=False)


def run_page(page: Path) -> int:
    """Run the Python blocks of ``page``, each alone; return how many ran. Fails naming the
    block."""
    ran = 0
    namespace: dict[str, Any] = {}
    for number, block in enumerate(parse(page), start=1):
        where = f"{_name(page)}, block {number} (line {block.line})"
        code = _compile(block, where)
        if block.not_run is not None:
            continue
        if not block.continues:
            namespace = {"__name__": "__main__"}
        printed = _run(code, namespace, where)
        ran += 1
        if block.expected is not None:
            want, got = _normalise(block.expected), _normalise(printed)
            if want != got:
                diff = "\n".join(
                    difflib.unified_diff(
                        want.splitlines(), got.splitlines(), "the page", "printed", lineterm=""
                    )
                )
                pytest.fail(f"{where} printed something else:\n{diff}", pytrace=False)
    return ran


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_page_examples_run(page: Path) -> None:
    run_page(page)


# -- the conventions themselves: a test that cannot fail would be a defect -------------------


def _page(tmp_path: Path, text: str) -> Path:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return page


def test_a_wrong_output_fails_naming_page_and_line(tmp_path: Path) -> None:
    page = _page(tmp_path, "# t\n\n```python\nprint(6 * 7)\n```\n\n```text\n41\n```\n")
    with pytest.raises(
        pytest.fail.Exception, match=r"(?s)page.md, block 1 \(line 3\)[^\n]*\n.*-41"
    ):
        run_page(page)


def test_a_raising_block_fails_with_the_page_line(tmp_path: Path) -> None:
    page = _page(tmp_path, "# t\n\n```python\nx = 1\nraise ValueError(x)\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)page.md\", line 5.*ValueError: 1"):
        run_page(page)


def test_not_run_needs_a_reason_and_still_compiles(tmp_path: Path) -> None:
    skipped = "<!-- not run: needs a broker -->\n```python\nraise SystemExit\n```\n"
    assert run_page(_page(tmp_path, skipped)) == 0
    with pytest.raises(AssertionError, match="needs a reason"):
        parse(_page(tmp_path, "<!-- not run: -->\n```python\npass\n```\n"))
    with pytest.raises(pytest.fail.Exception, match="does not compile"):
        run_page(_page(tmp_path, "<!-- not run: x -->\n```python\ndef f(:\n```\n"))


def test_each_block_runs_alone(tmp_path: Path) -> None:
    page = _page(tmp_path, "# t\n\n```python\nimport math\n```\n\n```python\nmath.pi\n```\n")
    with pytest.raises(pytest.fail.Exception, match=r"(?s)block 2 .*NameError: name 'math'"):
        run_page(page)


def test_a_block_marked_continues_runs_in_what_the_one_before_left(tmp_path: Path) -> None:
    page = _page(
        tmp_path,
        "# t\n\n```python\nimport math\n```\n\n<!-- continues -->\n"
        "```python\nprint(round(math.pi, 2))\n```\n\n```text\n3.14\n```\n",
    )
    assert run_page(page) == 2


def test_a_stray_marker_fails(tmp_path: Path) -> None:
    with pytest.raises(AssertionError, match="belongs right"):
        parse(_page(tmp_path, "<!-- not run: far away -->\n\nprose\n\n```python\npass\n```\n"))


def test_output_region_is_compared_as_markdown(tmp_path: Path) -> None:
    text = (
        "```python\nprint('| a |\\n| - |')\n```\n<!-- output -->\n| a |\n| - |\n<!-- /output -->\n"
    )
    assert run_page(_page(tmp_path, text)) == 1
    with pytest.raises(pytest.fail.Exception, match="printed something else"):
        run_page(_page(tmp_path, text.replace("| a |\n| - |\n<", "| b |\n| - |\n<")))


def test_examples_run_in_virtual_time(tmp_path: Path) -> None:
    """An hour of waiting, on asyncio and on trio, printed exactly."""
    text = (
        "```python\nimport asyncio, trio\n"
        "async def main():\n    loop = asyncio.get_running_loop()\n"
        "    start = loop.time()\n    await asyncio.sleep(3600)\n"
        "    print(loop.time() - start)\n"
        "asyncio.run(main())\n"
        "async def main_trio():\n    start = trio.current_time()\n"
        "    await trio.sleep(3600)\n    print(trio.current_time() - start)\n"
        "trio.run(main_trio)\n```\n\n```text\n3600.0\n3600.0\n```\n"
    )
    assert run_page(_page(tmp_path, text)) == 1


# -- docstring examples (shown in the API reference) ------------------------------------------


def _docstring_tests() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder()
    found: dict[str, doctest.DocTest] = {}
    for name in aiowheel.__all__:
        obj = getattr(aiowheel, name)
        for test in finder.find(obj, f"aiowheel.{name}", globs=vars(aiowheel).copy()):
            if test.examples:
                found.setdefault(test.name, test)
    return sorted(found.values(), key=lambda test: test.name)


def test_docstring_examples_exist() -> None:
    """HierarchicalWheel's example is the one the API reference shows first."""
    assert "aiowheel.HierarchicalWheel" in {test.name for test in _docstring_tests()}


@pytest.mark.parametrize("test", _docstring_tests(), ids=lambda test: test.name)
def test_docstring_examples_run(test: doctest.DocTest) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    result = runner.run(test, out=out.write)
    assert result.failed == 0, out.getvalue()


def test_spark_schemas_are_what_the_reference_says() -> None:
    """docs/api/spark.rst describes these by hand (autodoc has no docstring for data)."""
    pytest.importorskip("pyspark")
    from aiowheel.spark.events import EVENT_SCHEMA, KIND_RANK
    from aiowheel.spark.stream import EXPIRY_SCHEMA

    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in EVENT_SCHEMA.fields] == [
        ("key", "string", False),
        ("ts", "double", False),
        ("kind", "string", False),
        ("event_id", "string", True),
    ]
    assert sorted(KIND_RANK, key=KIND_RANK.__getitem__) == ["open", "data", "close"]
    assert [column.split() for column in EXPIRY_SCHEMA.split(",")] == [
        ["key", "string"],
        ["timeout", "double"],
        ["expired_at", "double"],
        ["last_seen", "double"],
    ]
