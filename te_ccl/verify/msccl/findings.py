"""Findings of the MSCCL checker and the catalogue of rules they cite.

Every :class:`Finding` names a rule from :data:`RULES`; the rule carries its meaning
(why the runtime or the GPUs care), which is appended to each message so a reader
needs no manual. ``blocks_execution`` marks rules after whose violation symbolic
execution would only produce noise (the program's shape itself is broken).

A broken file can break one rule at every tag, hundreds of thousands of times; the
checks gather findings in :class:`Findings`, which keeps the first :data:`KEEP` of each
rule and counts the rest, so memory and output stay bounded and the totals exact.

>>> f = finding("leading-zero", "tb id '010' reads as 8", gpu=0, tb=8)
>>> f.rule, f.severity, f.gpu, f.tb, f.step
('leading-zero', 'error', 0, 8, None)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from te_ccl.runtime_limits import MSCCL, RCCL

__all__ = ["Rule", "RULES", "Finding", "Findings", "finding", "clip", "KEEP"]

KEEP = 5
"""Findings kept per rule: the first few show what is wrong and where, the others
only add to the rule's count."""


@dataclass(frozen=True)
class Rule:
    """One checked rule: its name, what it protects, and whether execution can go on."""

    name: str
    meaning: str
    blocks_execution: bool = False
    severity: str = "error"


_RULES = [
    # --- textual rules of the runtime's hand-written XML reader ---------------------
    Rule("not-text", "the runtime reads the file byte by byte as text", True),
    Rule("xml-declaration", "the runtime's reader has no `<?xml ...?>` support and fails on `?`"),
    Rule("text-outside-tags", "between tags the runtime accepts only spaces and newlines", True),
    Rule("tab-before-tag", "the runtime skips only spaces and newlines before `<`; a tab "
         "makes it fail with \"expecting '<'\""),
    Rule("one-tag-per-line", "the format puts one tag per line (what msccl-tools writes and "
         "the runtime's reader is tested with)"),
    Rule("newline-in-tag", "the runtime's reader ends a tag at a newline and then fails "
         "expecting `>`"),
    Rule("attribute-spacing", "the runtime separates attributes by exactly one space and "
         "reads `key=\"value\"` with no spaces around `=`"),
    Rule("double-quotes", "the runtime reads attribute values up to the next double quote "
         "only"),
    Rule("malformed-tag", "the runtime could not read this tag", True),
    Rule("unbalanced-tags", "every element must be closed by a matching closing tag", True),
    Rule("name-too-long", "the runtime stores names and values in 255-byte buffers; names "
         "of 254+ characters fail"),
    Rule("too-many-attributes", "the runtime keeps only the first 16 attributes of an "
         "element", severity="warning"),
    Rule("duplicate-attribute", "the runtime uses the first occurrence of an attribute",
         severity="warning"),
    Rule("ignored-element", "the runtime skips elements it does not know (with their "
         "content)", severity="warning"),
    Rule("first-element-algo", "the runtime reads the algorithm's metadata from the first "
         "element, which must be `<algo`", True),
    Rule("xml-node-limit", f"the runtime's reader holds at most {MSCCL.max_elements} elements per rank "
         "(algo, gpus, and that rank's tbs and steps)"),
    Rule("leading-zero", "numbers are read with C strtol(..., 0): a leading zero means "
         "octal (`010` is 8, `08` is 0)"),
    Rule("not-an-integer", "numbers are read with C strtol(..., 0), which silently stops at "
         "the first non-digit"),
    Rule("missing-attribute", "the runtime refuses an element without this attribute", True),
    Rule("missing-algo-attribute", "the runtime refuses an algo without this attribute "
         "(the legacy format lacks minBytes/maxBytes/outofplace)"),
    # --- checks the runtime's parser applies, in its order --------------------------
    Rule("proto", "proto must be Simple, LL128 or LL"),
    Rule("coll", "coll must name a collective the runtime implements", True),
    Rule("scratch-chunks", "s_chunks must be >= 0 (it sizes the scratch buffer)", True),
    Rule("tb-id-range", "thread block ids are below MSCCL_MAX_NUM_THREAD_BLOCKS "
         f"({MSCCL.max_threadblocks} in the MSCCL executor, {RCCL.max_threadblocks} in RCCL)",
         True),
    Rule("tb-id-duplicate", "each thread block id appears once per GPU", True),
    Rule("peer", "send/recv peers are a rank or -1, never the GPU itself", True),
    Rule("channel-range", f"chan is below MAXCHANNELS ({MSCCL.max_channels} in the MSCCL "
         f"executor, {RCCL.max_channels} in RCCL)", True),
    Rule("step-range", f"s must be in 0..max_steps-1 (MSCCL_MAX_NUM_STEPS, "
         f"{MSCCL.max_steps} by default)"),
    Rule("step-type", "type must be s, r, rcs, rrs, rrc, rrcs, cpy, re or nop", True),
    Rule("buffer", "buffers are i (input), o (output) or s (scratch)", True),
    Rule("count-range", f"cnt must be 0..{MSCCL.max_count - 1} (MSCCL_MAX_COUNT)", True),
    Rule("send-without-peer", "a step that sends needs the thread block's send peer", True),
    Rule("recv-without-peer", "a step that receives needs the thread block's recv peer", True),
    Rule("offset-range", "offsets must be -1 or inside the buffer's chunk count", True),
    Rule("nop-chain", "extra dependencies (nops) must be followed by a step with its own "
         "depid >= 0: the runtime attaches the nops' waits to that step"),
    Rule("hasdep", "hasdep must be 0 or 1"),
    Rule("tb-missing", "thread block ids must be contiguous 0..n-1 on each GPU", True),
    Rule("tbs-per-channel", f"at most {MSCCL.max_peers} sending and {MSCCL.max_peers} receiving thread "
         "blocks per channel",
         True),
    # --- rules the runtime does not check ---------------------------------------------
    Rule("step-position", "the kernel counts steps by position (nops included), so s must "
         "equal the step's position or dependencies point at the wrong step"),
    Rule("dependency-target", "depid/deps must name an existing step of a thread block on "
         "the same GPU, else the waiting step spins forever", True),
    Rule("dependency-flag", "a step others wait on must have hasdep=\"1\", otherwise it "
         "publishes no flag and the waiter depends on a later step (or hangs)"),
    Rule("nop-dependency", "a nop exists to carry a dependency; the kernel does not count a "
         "nop with depid=-1, so every later flag of the thread block names the wrong step"),
    Rule("depid-range", f"depid is stored in 8 bits: it must be <= {MSCCL.max_depid}", True),
    Rule("channel-count", "chan must be < nchannels: the communicator may have only "
         "nchannels channels"),
    Rule("connection-unique", "on one GPU each (chan, send peer) and each (chan, recv peer) "
         "belongs to one thread block; two would share one connection's FIFO", True),
    Rule("connection-sequence", "sends and receives on a connection (gpu, peer, chan) match "
         "in order: the cnt sequence sent must equal the cnt sequence received"),
    Rule("offset-bounds", "offset..offset+cnt must lie inside the buffer (the runtime checks "
         "only the start)", True),
    Rule("gpu-ids", "gpu ids must cover 0..ngpus-1, each once: a rank without its gpu "
         "element runs nothing", True),
    Rule("max-steps", f"at most max_steps steps per thread block (MSCCL_MAX_NUM_STEPS, "
         f"{MSCCL.max_steps} in the default runtime build)"),
    Rule("chunk-layout", "nchunksperloop must divide into the collective's per-rank chunks",
         True),
    Rule("buffer-size", "i_chunks/o_chunks may not exceed the chunks the user's buffers "
         "hold for this collective: steps beyond them touch memory outside sendbuff/recvbuff"),
    Rule("root", "rooted collectives need a root; pass --root when it cannot be inferred",
         True),
    Rule("inplace-flags", "an algorithm must be usable in-place or out-of-place"),
    # --- symbolic execution -------------------------------------------------------------
    Rule("deadlock", "every thread block must be able to finish: a step that waits for a "
         "flag, for data or for connection slots that never come hangs the GPUs"),
    Rule("uninitialized-read", "a step read a chunk no step wrote and that holds no input "
         "data, i.e. garbage"),
    Rule("data-race", "two accesses to one chunk, at least one a write, that no program "
         "order, dependency flag or send/receive orders: the result depends on timing"),
    Rule("unreceived-data", "data sent on a connection that no step receives: the next "
         "collective on that connection would read it"),
    Rule("wrong-result", "at the end the buffers must hold what the collective defines"),
]

RULES: dict[str, Rule] = {r.name: r for r in _RULES}


@dataclass(frozen=True)
class Finding:
    """One violation: the rule, where (GPU, thread block, step position, line), and why."""

    rule: str
    message: str
    gpu: int | None = None
    tb: int | None = None
    step: int | None = None
    line: int | None = None
    severity: str = "error"

    def as_dict(self) -> dict[str, object]:
        return {"rule": self.rule, "severity": self.severity, "gpu": self.gpu, "tb": self.tb,
                "step": self.step, "line": self.line, "message": self.message}

    def where(self) -> str:
        """``gpu 1 tb 2 step 3`` (only the parts that apply; ``file`` for none)."""
        parts = [f"{k} {v}" for k, v in (("gpu", self.gpu), ("tb", self.tb), ("step", self.step))
                 if v is not None]
        return " ".join(parts) if parts else "file"


def clip(text: str, limit: int = 40) -> str:
    """``text`` as a message quotes it: a value from the file can be megabytes long.

    >>> clip("Simple"), clip("x" * 50, 4)
    ('Simple', 'xxxx… (50 characters)')
    """
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def finding(rule: str, detail: str, *, gpu: int | None = None, tb: int | None = None,
            step: int | None = None, line: int | None = None) -> Finding:
    """Build a finding whose message is ``detail`` followed by the rule's meaning."""
    r = RULES[rule]
    return Finding(rule, f"{detail} — {r.meaning}", gpu, tb, step, line, r.severity)


@dataclass
class Findings:
    """Findings in the order found, the first :data:`KEEP` of each rule, and how many
    each rule had in all (``counts``).

    >>> found = Findings()
    >>> for gpu in range(7):
    ...     found.append(finding("gpu-ids", "not a rank", gpu=gpu))
    >>> len(found), found.counts
    (5, {'gpu-ids': 7})
    """

    kept: list[Finding] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def append(self, f: Finding) -> None:
        n = self.counts.get(f.rule, 0) + 1
        self.counts[f.rule] = n
        if n <= KEEP:
            self.kept.append(f)

    def __iadd__(self, more: Iterable[Finding]) -> Findings:
        """Add ``more`` after these; another :class:`Findings` adds its counts too."""
        if not isinstance(more, Findings):
            for f in more:
                self.append(f)
            return self
        room = {rule: KEEP - min(self.counts.get(rule, 0), KEEP) for rule in more.counts}
        for f in more.kept:
            if room[f.rule] > 0:
                room[f.rule] -= 1
                self.kept.append(f)
        for rule, n in more.counts.items():
            self.counts[rule] = self.counts.get(rule, 0) + n
        return self

    def __add__(self, more: Iterable[Finding]) -> Findings:
        out = Findings()
        out += self
        out += more
        return out

    def __iter__(self) -> Iterator[Finding]:
        return iter(self.kept)

    def __len__(self) -> int:
        return len(self.kept)

    def replaced(self, kept: Iterable[Finding]) -> Findings:
        """The same counts with the kept findings rewritten (one for one, same rules)."""
        return Findings(list(kept), dict(self.counts))
