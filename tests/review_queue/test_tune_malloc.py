"""``tune_malloc``: large blocks go back to the system when freed (glibc's adjustable mmap threshold off)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vigil.run import tune_malloc

SCRIPT = """
import sys
from vigil.run import tune_malloc

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024

if sys.argv[1] == "tuned":
    assert tune_malloc()
base = rss_mib()
for _ in range(4):  # a request body and its inflated copy, freed, four times
    body = bytes(20 * 2**20)
    inflated = b"x" * (18 * 2**20)
    del body, inflated
print(rss_mib() - base)
"""


def _retained_mib(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_MMAP_THRESHOLD_"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, check=True, env=env)
    return int(done.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and /proc are Linux's")
def test_freed_large_blocks_are_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Untuned, glibc keeps a freed 18-20 MiB block in its heap once the threshold has risen; tuned, none."""
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert tune_malloc()
    assert _retained_mib("plain") >= 16
    assert _retained_mib("tuned") <= 4


def test_an_operators_threshold_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """``MALLOC_MMAP_THRESHOLD_`` set in the environment: glibc applied it at start; nothing is changed."""
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "4194304")
    assert tune_malloc() is False


TRIM_SCRIPT = """
import sys
from vigil.run import trim_malloc

def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024

texts = [b"m" * (1024 + i % 1024) for i in range(60_000)]  # ~90 MiB of captured-message-sized blocks
kept = texts[::16]  # one in sixteen outlives the others (the late-span cache)
del texts
before = rss_mib()
if sys.argv[1] == "trim":
    assert trim_malloc()
print(before - rss_mib())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc are Linux's")
def test_trim_returns_the_free_pages_between_long_lived_blocks() -> None:
    """1-2 KB blocks freed around survivors stay resident (the heap cannot shrink past a survivor);
    ``trim_malloc`` gives their pages back."""

    def released(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", TRIM_SCRIPT, mode], capture_output=True, text=True, check=True)
        return int(done.stdout.strip())

    assert released("plain") <= 4
    assert released("trim") >= 40
