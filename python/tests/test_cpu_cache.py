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
        (1.5, TypeError, "must be an int"),
        (True, TypeError, "must be an int"),
    ],
)
def test_bad_limits_are_refused_by_name(bad, error, text):
    with pytest.raises(error, match="customop.cpu_cache.set_limit: limit_bytes " + text):
        customop.cpu_cache.set_limit(bad)
