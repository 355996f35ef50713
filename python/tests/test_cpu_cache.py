"""customop.cpu_cache: an op's freed CPU output is the memory of its next call, the counters and
the limit are readable and settable from Python, and bad limits are refused by name."""

import pytest
import torch

import customop

MIB = 1 << 20


@pytest.fixture
def cache():
    previous = customop.cpu_cache.set_limit(256 * MIB)
    customop.cpu_cache.release()
    yield customop.cpu_cache
    customop.cpu_cache.set_limit(previous)


def test_an_ops_freed_output_serves_its_next_call(cache):
    x = torch.randn(1024, 1024)  # 4 MiB
    y = customop.rms_norm(x, torch.ones(1024))
    ptr = y.data_ptr()
    del y
    assert cache.stats()["idle_bytes"] == 4 * MIB
    hits = cache.stats()["hits"]
    y = customop.rms_norm(x, torch.ones(1024))
    assert y.data_ptr() == ptr
    assert cache.stats()["hits"] == hits + 1
    torch.testing.assert_close(y, x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6))


def test_release_and_limit(cache):
    y = customop.weighted_sum_backward(torch.randn(512, 1024), [1.0, 2.0])  # 2 x 2 MiB
    assert cache.stats()["live_bytes"] >= 4 * MIB
    del y
    assert cache.release() == 4 * MIB
    assert cache.stats()["idle_bytes"] == 0
    assert cache.set_limit(0) == 256 * MIB
    misses = cache.stats()["misses"]
    y = customop.rms_norm(torch.randn(1024, 1024), torch.ones(1024))
    del y
    assert cache.stats()["misses"] == misses
    assert cache.stats()["idle_bytes"] == 0


@pytest.mark.parametrize(
    "bad, error, text",
    [
        (-1, ValueError, "must be >= 0"),
        (1 << 63, ValueError, "must be >= 0 and <= 2"),
        (1.5, TypeError, "must be an int"),
        (True, TypeError, "must be an int"),
    ],
)
def test_bad_limits_are_refused_by_name(bad, error, text):
    with pytest.raises(error, match="customop.cpu_cache.set_limit: limit_bytes " + text):
        customop.cpu_cache.set_limit(bad)


def test_an_integer_like_limit_is_taken(cache):
    numpy = pytest.importorskip("numpy")
    assert cache.set_limit(numpy.int64(8 * MIB)) == 256 * MIB
    assert cache.stats()["limit_bytes"] == 8 * MIB


def test_the_profiler_sees_cached_outputs(cache):
    x, w = torch.randn(1024, 1024), torch.ones(1024)
    with torch.profiler.profile(profile_memory=True) as prof:
        y = customop.rms_norm(x, w)
        del y
    events = [e for e in prof.events() if e.cpu_memory_usage != 0]
    assert any(e.cpu_memory_usage == 4 * MIB for e in events), [
        (e.name, e.cpu_memory_usage) for e in events]


@pytest.mark.parametrize("value, limit", [("123", 123), (" -5", None), ("12 ", None),
                                          (str(1 << 63), None), ("0", 0)])
def test_the_environments_limit_is_taken_only_as_digits(value, limit):
    import os
    import subprocess
    import sys

    code = ("import warnings, torch, customop\n"
            "warnings.simplefilter('always')\n"
            "customop.rms_norm(torch.randn(1024, 1024), torch.ones(1024))\n"
            "print(customop.cpu_cache.stats()['limit_bytes'])\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, CUSTOMOP_CPU_CACHE_BYTES=value), timeout=120)
    assert run.returncode == 0, run.stderr
    got = int(run.stdout.split()[-1])
    if limit is None:
        assert "CUSTOMOP_CPU_CACHE_BYTES must be a whole number of bytes" in run.stderr
        assert got > 0
    else:
        assert got == limit and "CUSTOMOP_CPU_CACHE_BYTES" not in run.stderr
