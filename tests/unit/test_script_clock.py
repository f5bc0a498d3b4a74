"""The scripts' clock: Redis TIME in every script a master loads; a test store's clock only in the scripts
a store built with one renders (master/scripts.py, lib.lua now_ms)."""

from __future__ import annotations

import pytest

from sparkyard.keys import Keys
from sparkyard.master.scripts import INJECTED_TIME, REDIS_TIME, SCRIPT_NAMES, UNFENCED, render


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_a_production_script_takes_no_time_from_its_caller(name: str) -> None:
    source = render(name, Keys())
    assert REDIS_TIME in source and INJECTED_TIME not in source
    assert source.count("table.remove(ARGV)") == (0 if name in UNFENCED else 1)  # the fence takes the epoch


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_a_test_script_takes_the_time_from_its_last_argument_before_the_fence_takes_the_epoch(name: str) -> None:
    source = render(name, Keys(), injected_time=True)
    assert REDIS_TIME not in source
    clock = source.index(INJECTED_TIME)
    assert clock < source.index("local function now_ms()")
    fence = source.find("local CALLER_EPOCH = table.remove(ARGV)")
    assert fence == -1 or clock < fence
