"""Random single-step mutations of valid files: reported or still valid, never a crash."""

from __future__ import annotations

import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from te_ccl.verify.msccl.verify import Report, verify_msccl

from .test_semantics import VALID
from .xmltools import REFERENCE

_FILES = ["azure_allgather_ring_8_1_1.xml", "azure_allreduce_1step_4_1.xml",
          "azure_alltoall_allpairs_8_1.xml", "azure_allgather_recursive_doubling_8_1.xml"]


def _sources() -> list[str]:
    texts = [VALID[k] for k in sorted(VALID)]
    if REFERENCE.is_dir():
        texts += [(REFERENCE / "generated" / name).read_text() for name in _FILES]
    # recursive doubling hangs above 8 MiB (test_buffering.py): keep it to what it can run
    texts[-1] = texts[-1].replace('maxBytes="0"', f'maxBytes="{8 << 20}"', 1)
    return texts


SOURCES = _sources()
_VALUES = {
    "srcoff": st.integers(-2, 9), "dstoff": st.integers(-2, 9), "cnt": st.integers(-1, 73),
    "depid": st.integers(-2, 130), "deps": st.integers(-2, 9), "hasdep": st.integers(-1, 2),
    "s": st.integers(-1, 66), "send": st.integers(-2, 9), "recv": st.integers(-2, 9),
    "chan": st.integers(-1, 33), "id": st.integers(-1, 9),
    "type": st.sampled_from(["s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop", "x"]),
    "srcbuf": st.sampled_from(["i", "o", "s", "q"]), "dstbuf": st.sampled_from(["i", "o", "s"]),
}


@st.composite
def mutations(draw) -> tuple[str, str]:
    text = draw(st.sampled_from(SOURCES))
    lines = text.split("\n")
    targets = [i for i, line in enumerate(lines) if "<step " in line or "<tb " in line]
    i = draw(st.sampled_from(targets))
    if "<step " in lines[i] and draw(st.integers(0, 5)) == 0:
        del lines[i]
        return text, "\n".join(lines)
    keys = [k for k in re.findall(r'(\w+)="', lines[i]) if k in _VALUES]
    key = draw(st.sampled_from(keys))
    value = draw(_VALUES[key])
    lines[i] = re.sub(rf'\b{key}="[^"]*"', f'{key}="{value}"', lines[i], count=1)
    return text, "\n".join(lines)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutations())
def test_mutation_is_reported_or_valid_never_a_crash(case: tuple[str, str]) -> None:
    original, mutated = case
    report = verify_msccl(mutated)
    assert isinstance(report, Report)
    if mutated == original:
        assert report.valid
    for f in report.findings:
        assert f.rule and f.message and f.severity in ("error", "warning")
