"""The docs' shell and Python blocks run as a reader pastes them.

Each page's fenced blocks are extracted by their language (`sh`, `toml`, `python`)
and run in a scratch directory with the `mrs` of this checkout on PATH. The bus
config a page assumes is written first, with free ports; the only text changed in a
pasted block is a listen address (`127.0.0.1:7001`) replaced by the one the group
got, so tests can run beside each other.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from sim.ports import free_port
from sim.processes import GroupProcess

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^( *)```([a-z]*)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def blocks(page: str, section: str, language: str) -> list[str]:
    """The `language` blocks of the section whose heading starts with `section`, in
    page order, unindented (blocks inside list items are indented)."""
    text = (DOCS / page).read_text()
    heading = re.search(rf"^#{{2,3}} {re.escape(section)}.*\n", text, re.MULTILINE)
    assert heading, f"no section {section!r} in {page}"
    following = re.search(r"^#{2,3} ", text[heading.end() :], re.MULTILINE)
    start = heading.end()
    end = start + following.start() if following else len(text)
    return [
        textwrap.dedent(body)
        for _indent, lang, body in FENCE.findall(text[start:end])
        if lang == language
    ]


def shell_environment() -> dict[str, str]:
    """This environment with the checkout's `mrs` and `python` first on PATH."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}


def run_shell(script: str, cwd: Path) -> subprocess.CompletedProcess:
    """One shell block, as pasted into bash (`set -e`: the first failing line stops it)."""
    return subprocess.run(
        ["bash", "-e", "-c", script], cwd=cwd, env=shell_environment(), capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


def run_python(source: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", source], cwd=cwd, capture_output=True, text=True, timeout=120
    )


RUNNABLE = ("sh", "bash", "shell", "python")
ADDRESS = re.compile(r"127\.0\.0\.1:700(\d)")
READY_TIMEOUT_S = 30.0


def fenced(page: str, languages: tuple[str, ...]) -> list[tuple[str, str]]:
    """The blocks of `page` in `languages`, as (language, unindented body), in page
    order."""
    text = (DOCS / page).read_text()
    return [
        (lang, textwrap.dedent(body))
        for _indent, lang, body in FENCE.findall(text)
        if lang in languages
    ]


def runnable_blocks(page: str) -> list[tuple[str, str]]:
    """Every block of `page` a reader would paste into a shell or Python."""
    return fenced(page, RUNNABLE)


def console_commands(block: str) -> str:
    """The commands of a transcript (its `$ ` lines), as a script."""
    return "\n".join(line[2:] for line in block.splitlines() if line.startswith("$ "))


def pages_with_runnable_blocks() -> set[str]:
    return {path.name for path in DOCS.glob("*.md") if runnable_blocks(path.name)}


class PastedPage:
    """One page's blocks pasted in order into one scratch checkout: `docs/examples`
    copied (its groups on free ports), this checkout's `.venv`, `.ci`, `benchmarks`,
    `tests` and `pyproject.toml` linked, and `mrs` on PATH. A shell block that runs
    `mrs serve` is started in its own session and counts as done once each server
    printed READY; the servers stop when the page is done. A scratch copy, because
    blocks write where a reader's would (`docs/examples/g1`, `bus.toml`, `shop.pw`)."""

    def __init__(self, page: str, directory: Path) -> None:
        self.page = page
        self.directory = directory
        self.ports: dict[str, int] = {}
        self.servers: list[tuple[subprocess.Popen[bytes], IO[bytes]]] = []
        self.log = (directory / "servers.log").open("ab")
        shutil.copytree(DOCS / "examples", directory / "docs" / "examples")
        for name in (".ci", "benchmarks", "tests", "pyproject.toml"):
            (directory / name).symlink_to(ROOT / name)
        (directory / ".venv").symlink_to(Path(sys.prefix))
        self.rewrite(directory / "docs" / "examples" / "bus.toml")

    def address(self, text: str) -> str:
        """`text` with each documented listen address 127.0.0.1:700N replaced by the
        free port group N got here."""

        def port(match: re.Match) -> str:
            return f"127.0.0.1:{self.ports.setdefault(match.group(1), free_port())}"

        return ADDRESS.sub(port, text)

    def rewrite(self, path: Path) -> None:
        path.write_text(self.address(path.read_text()))

    def write(self, name: str, text: str) -> Path:
        path = self.directory / name
        path.write_text(self.address(text))
        return path

    def run(self, language: str, body: str) -> str:
        """One block as pasted; its stdout. A failing block fails the test."""
        pasted = self.address(body)
        if language == "python":
            done = run_python(pasted, self.directory)
        elif re.search(r"^\s*(\S*/)?mrs serve ", pasted, re.MULTILINE):
            return self.serve(pasted)
        else:
            done = run_shell(pasted, self.directory)
        assert done.returncode == 0, f"{self.page}:\n{pasted}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def serve(self, script: str) -> str:
        """A block that starts servers, in the foreground or with `&`: done when each
        `mrs serve` line's server printed READY."""
        starts = re.findall(r"^\s*(?:\S*/)?mrs serve .*$", script, re.MULTILINE)
        # Unbuffered bytes: a buffered reader took two servers' READY lines in one read,
        # and select() then saw nothing more to read and waited out the timeout.
        process = subprocess.Popen(
            ["bash", "-e", "-c", script], cwd=self.directory, env=shell_environment(),
            stdout=subprocess.PIPE, stderr=self.log, start_new_session=True, bufsize=0,
        )  # fmt: skip
        output = process.stdout
        assert output is not None
        self.servers.append((process, output))
        lines: list[str] = []
        while sum(line.startswith("READY ") for line in lines) < len(starts):
            readable, _, _ = select.select([output], [], [], READY_TIMEOUT_S)
            line = output.readline().decode(errors="replace") if readable else ""
            if not line:
                self.log.flush()
                errors = (self.directory / "servers.log").read_text(errors="replace")[-2000:]
                raise AssertionError(
                    f"{self.page}: no READY from\n{script}\n{''.join(lines)}\nstderr:\n{errors}"
                )
            lines.append(line)
        if all(start.split("#")[0].rstrip().endswith("&") for start in starts):
            assert process.wait(timeout=READY_TIMEOUT_S) == 0, f"{self.page}:\n{script}"
        return "".join(lines)

    def serve_examples(self) -> str:
        """Group 1 of docs/examples/bus.toml, as getting-started.md starts it, for the
        pages that say they run against it."""
        return self.serve("mrs serve --config docs/examples/bus.toml --group 1 &")

    def run_all(self, saved: dict[int, str] | None = None) -> list[str]:
        """Every runnable block of the page, in order; their outputs. `saved` maps the
        index of a program the page says to save and run to its command line
        (`python NAME.py ARGS`): it is written to NAME.py and run so."""
        outputs = []
        for index, (language, body) in enumerate(runnable_blocks(self.page)):
            if saved and index in saved:
                self.write(saved[index].split()[1], body)
                outputs.append(self.run("sh", saved[index]))
            else:
                outputs.append(self.run(language, body))
        return outputs

    def close(self) -> None:
        """SIGTERM to every server a block started; done when the last of them closed
        its stdout (an event: the servers are not this process's children)."""
        for process, _output in self.servers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process, output in self.servers:
            while select.select([output], [], [], READY_TIMEOUT_S)[0]:
                if not output.readline():
                    break
            process.wait(timeout=READY_TIMEOUT_S)
            output.close()
        self.log.close()


@pytest.fixture
def pasted(tmp_path: Path) -> Iterator[Callable[[str], PastedPage]]:
    """Opens a page to paste into (one per test); its servers stop after the test."""
    opened: list[PastedPage] = []

    def open_page(page: str) -> PastedPage:
        opened.append(PastedPage(page, tmp_path))
        return opened[-1]

    try:
        yield open_page
    finally:
        for page in opened:
            page.close()


def two_group_bus(directory: Path) -> tuple[Path, dict[int, int]]:
    """The bus security.md's worked example starts from: NYC (1) with ORDERS (1.10),
    LDN (2) with SHIPPING (2.20), linked."""
    ports = {1: free_port(), 2: free_port()}
    text = ""
    for group_id, name, queue in ((1, "NYC", "ORDERS"), (2, "LDN", "SHIPPING")):
        text += textwrap.dedent(f"""\
            [[group]]
            id = {group_id}
            name = "{name}"
            listen = "127.0.0.1:{ports[group_id]}"
            data_dir = "g{group_id}"
            [[group.queue]]
            id = {group_id}0
            name = "{queue}"
            confirm = "explicit-out-of-order"

            """)
    path = directory / "bus.toml"
    path.write_text(text + "[[link]]\ngroups = [1, 2]\n")
    return path, ports


def test_security_worked_example_runs_as_pasted(tmp_path) -> None:
    """docs/security.md, "By hand": [auth] at the top of bus.toml, TLS, link secrets
    and applications (their password files made by the block itself), keys and the
    policy file, the groups started, and shop's Python block putting a sealed order."""
    config, ports = two_group_bus(tmp_path)
    page = "security.md"
    auth_table, _tls_table, policy = blocks(page, "Worked example", "toml")
    config.write_text(auth_table + "\n" + config.read_text())
    for script in blocks(page, "Worked example", "sh"):
        done = run_shell(script, tmp_path)
        assert done.returncode == 0, f"{script}\n{done.stderr}"
    assert all((tmp_path / f"{name}.pw").stat().st_mode & 0o077 == 0 for name in ("shop",))
    (tmp_path / "protection.toml").write_text(policy)
    groups = [GroupProcess(config, group_id) for group_id in (1, 2)]
    for group in groups:
        group.start()
    section = blocks(page, "Worked example", "sh") + blocks(page, "Worked example", "python")
    assert sorted(section) == sorted(body for _language, body in runnable_blocks(page))
    try:
        [python] = blocks(page, "Worked example", "python")
        pasted = python.replace("127.0.0.1:7001", f"127.0.0.1:{ports[1]}")
        done = run_python(pasted, tmp_path)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["SUCCESS"]
    finally:
        for group in groups:
            group.terminate()


def test_getting_started(pasted) -> None:
    """The example bus's group 1 started as the page starts it, then each program
    against it, in page order."""
    serve, put_get, quickstart, blocking, errors = pasted("getting-started.md").run_all()
    assert serve.startswith("READY 127.0.0.1:")
    assert put_get.split()[:2] == ["Status.SUCCESS", "Status.STORED"]
    assert "confirmed and journaled to the PCJ" in quickstart
    assert blocking == ""
    assert "MessageTooBig: status MSGTOOBIG" in errors


def test_architecture(pasted) -> None:
    broken_build, in_process = pasted("architecture.md").run_all()
    assert broken_build.strip() == "['possdupl-always']"
    assert in_process


def test_configuration(pasted) -> None:
    """guards.py against group 1 of the example bus, as the page says."""
    page = pasted("configuration.md")
    page.serve_examples()
    guards, limit = page.run_all()
    assert "put 5 of 1 MiB: EXCEEDQUOTA, DISC_SUCCESS" in guards
    assert limit.split() == ["10000"]


def test_protocol(pasted) -> None:
    [frames] = pasted("protocol.md").run_all()
    assert "peer refused:" in frames


def test_journals(pasted) -> None:
    """The journal readers on group 1's journals while it serves, after a
    confirmed message (getting-started.md's quickstart) reached its PCJ."""
    page = pasted("journals.md")
    page.serve_examples()
    page.run("sh", "python docs/examples/quickstart.py 127.0.0.1:7001")
    pcj, checksum, dqf, commit_log = page.run_all()
    assert b"shift totals" in pcj.encode()
    assert checksum.split()[0] in ("ISA-L", "zlib")
    assert dqf.strip() == "0 messages in the DQF"
    assert commit_log.splitlines() == ["1 record after checkpoint 0", "0 records after close"]


def test_security_protection(pasted) -> None:
    """Section 1's keys, section 2's policy as protection.toml, group 1 of the example
    bus with the `protection` line on top, then section 3's put, sealed."""
    page = pasted("security-protection.md")
    [keys] = blocks(page.page, "1. Keys", "console")
    page.run("sh", console_commands(keys))
    policy, pointer = blocks(page.page, "2. Policies", "toml")
    page.write("protection.toml", policy)
    page.write("bus.toml", pointer + (DOCS / "examples" / "bus.toml").read_text())
    page.serve("mrs serve --config bus.toml --group 1 &")
    assert page.run_all() == [""]
    dump = page.run("sh", "mrs dump --config bus.toml --group 1 dqf --body")
    assert "card 4111" not in dump
    assert "hex:" + b"MRSPDMQ1".hex() in dump  # the envelope, not the body


def links_bus() -> str:
    """The two-group bus links.md shows (its first toml block)."""
    return fenced("links.md", ("toml",))[0][1]


def test_security_auth(pasted) -> None:
    """links.md's bus with a queue 10 in group 1 and the page's [auth] table on top:
    the credentials made, both groups started, shop's put, the operator's status."""
    page = pasted("security-auth.md")
    [auth_table] = blocks(page.page, "Turning it on", "toml")
    queue = '[[group.queue]]\nid = 10\nname = "ORDERS"\n'
    bus = links_bus().replace('name = "SENDER"\n', f'name = "SENDER"\n{queue}', 1)
    page.write("bus.toml", auth_table + "\n" + bus)
    creds_and_serve, put, status = page.run_all()
    assert creds_and_serve.count("READY ") == 2
    assert all(
        (page.directory / f"{name}.pw").stat().st_mode & 0o077 == 0 for name in ("op", "shop")
    )
    assert put == ""
    assert "NYC" in status and "LDN" in status


def test_links(pasted) -> None:
    """The page's bus, both groups started as shown, the put to LDN, remote_acks.py."""
    page = pasted("links.md")
    page.write("bus.toml", links_bus())
    serve, put, remote_acks = page.run_all()
    assert serve.count("READY ") == 2
    assert put.split() in (["STORED"], ["SAF_FORCED"])
    assert "no second copy; group 1 owes 0" in remote_acks


def test_timeouts_and_duplicates(pasted) -> None:
    """The resend under one idempotency key, against the example bus's group 1."""
    page = pasted("timeouts-and-duplicates.md")
    page.serve_examples()
    [resend] = page.run_all()
    first, second = (line.split() for line in resend.splitlines())
    assert first == second and first[0] == "STORED"


def test_sim(pasted) -> None:
    """One seed replayed with its history kept, and the in-process example."""
    page = pasted("sim.md")
    replay, in_process = page.run_all()
    assert "every seed kept every invariant" in replay
    assert (page.directory / "s41.json").stat().st_size > 0
    assert "wall time under 5 s: True" in in_process


def test_native(pasted) -> None:
    """`status` says one of the four states the page lists."""
    [status] = pasted("native.md").run_all()
    assert status.split(":")[0] in ("compiled", "stale", "absent", "off")


def test_undeliverable(pasted) -> None:
    """The runnable example saved and run against the example bus's group 1."""
    page = pasted("undeliverable.md")
    page.serve_examples()
    [example] = page.run_all(saved={0: "python undeliverable.py 127.0.0.1:7001"})
    assert "WF_MEM with DLJ: NOTSUPPORTED" in example
    assert example.count("NO_DQF") == 4


def test_journal_tools(pasted) -> None:
    """The example bus copied to bus.toml as the page says, group 1 serving with one
    confirmed message in its PCJ (getting-started.md's quickstart); every dump and
    jplay of the page, worked examples included."""
    page = pasted("journal-tools.md")
    page.run("sh", "cp docs/examples/bus.toml .")
    page.serve("mrs serve --config bus.toml --group 1 &")
    page.run("sh", "python docs/examples/quickstart.py 127.0.0.1:7001")
    dump, jplay, restore, redrive = page.run_all()
    assert '"target":"1.10"' in dump
    assert "dry run" in jplay.lower()
    assert restore and redrive


def test_audit(pasted) -> None:
    """audit.md's "Was anything lost?": group 1 of the example bus after the quickstart
    (one confirmed message), the page's put of INV-0042 (left in the DQF), one Spark
    audit with --out and --json, then the blocks that read its output and the trail."""
    page = pasted("audit.md")
    page.run("sh", "cp docs/examples/bus.toml .")
    page.serve("mrs serve --config bus.toml --group 1 &")
    page.run("sh", "python docs/examples/quickstart.py 127.0.0.1:7001")
    _put, reconciliation, gaps, correlation, trail, files = page.run_all()
    assert "'stored': 2, 'confirmed': 1" in reconciliation and "1.ORDERS" in reconciliation
    assert gaps.startswith("missing 0 duplicates 0")
    assert "INV- 1 0 0" in correlation
    assert "put by 1.SENDER to 1.ORDERS" in trail and "stored in DQF" in trail
    assert "report.html" in files and "reconciliation_queue.parquet" in files


def test_client_library(pasted) -> None:
    """Against the example bus's group 1 with one message waiting on ORDERS for the
    blocking client to get and confirm, then the GC-tuned producer's 1,000 puts."""
    page = pasted("client-library.md")
    page.serve_examples()
    put = 'from clients import connect_sync\nwith connect_sync("127.0.0.1:7001", "SENDER") as q:\n'
    page.run("python", put + '    q.put(b"order 17", target="ORDERS")\n')
    assert page.run_all() == ["", ""]
    pending = page.run("sh", "mrs dump --config docs/examples/bus.toml --group 1 dqf --json")
    assert len(pending.splitlines()) == 1_000


def test_every_block_names_its_language() -> None:
    """An untagged block could hide a command that no test pastes: every fence says
    what it holds (`sh`/`python` run here; `console`, `text`, `toml`, `json` do not)."""
    untagged = [
        (path.name, text[: match.start()].count("\n") + 1)
        for path in sorted(DOCS.glob("*.md"))
        for text in [path.read_text()]
        for match in FENCE.finditer(text)
        if not match.group(2)
    ]
    assert untagged == [], "fences without a language (page, line)"


def test_index(pasted) -> None:
    """The rule tests, as index.md runs them (not the page tests: no recursion)."""
    [rules] = pasted("index.md").run_all()
    assert " passed" in rules


def test_operations_admin(pasted) -> None:
    """operations.md, "Acting on queues": its transcript's commands against group 1 of
    the example bus (a `console` block: the page has no pasteable block of its own)."""
    page = pasted("operations.md")
    page.serve_examples()
    [transcript] = blocks(page.page, "Acting on queues", "console")
    output = page.run("sh", console_commands(transcript))
    assert "order 2 (7 B)" in output and "moved 3 from 1.10 to 1.16" in output
    assert "3 to the DLJ" in output and "\n3\n" in output and "exit 1" in output
    [changes] = blocks(page.page, "set-limits and add-queue", "console")
    output = page.run("sh", console_commands(changes))
    assert "unconfirmed_max=500" in output and "added ORDERS_RETRY (1.30)" in output
    config = (page.directory / "docs" / "examples" / "bus.toml").read_text()
    assert "unconfirmed_max = 500" in config and 'name = "ORDERS_RETRY"' in config


PASTED_BY = {
    "architecture.md": test_architecture,
    "audit.md": test_audit,
    "client-library.md": test_client_library,
    "configuration.md": test_configuration,
    "getting-started.md": test_getting_started,
    "index.md": test_index,
    "journal-tools.md": test_journal_tools,
    "journals.md": test_journals,
    "links.md": test_links,
    "native.md": test_native,
    "protocol.md": test_protocol,
    "security-auth.md": test_security_auth,
    "security-protection.md": test_security_protection,
    "security.md": test_security_worked_example_runs_as_pasted,
    "sim.md": test_sim,
    "timeouts-and-duplicates.md": test_timeouts_and_duplicates,
    "undeliverable.md": test_undeliverable,
}


def test_every_pasteable_block_is_run_by_its_pages_test() -> None:
    """A page with a `sh`/`bash`/`shell`/`python` block has a test here that pastes
    every such block (`PastedPage.run_all`, or security.md's worked-example section,
    which holds all of that page's blocks): a block a reader cannot paste alone is
    tagged `console` (a transcript with `$ ` prompts) or `text` (an outline)."""
    assert set(PASTED_BY) == pages_with_runnable_blocks()
