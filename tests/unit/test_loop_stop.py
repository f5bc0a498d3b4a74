"""A master's Loop service (bundle collection, retention) ends on stop even when its body loses the cancel: a
cancel landing inside a Redis call can be swallowed there, and the loop then goes on as after any failure. One
lost so right after a master began leading kept a master whose start failed (a taken ``--http``) alive."""

from __future__ import annotations

import asyncio

from sparkyard.lifecycle import Loop


async def test_stop_cancels_again_a_loop_that_lost_the_first_cancel() -> None:
    lost = 0

    async def body() -> None:
        nonlocal lost
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if lost:  # the second cancel ends it
                    raise
                lost += 1  # as a library call that turns the cancel into an error the loop retries on

    loop = Loop("swallows-once", body)
    await loop.start()
    await asyncio.sleep(0)
    await asyncio.wait_for(loop.stop(), timeout=30)
    assert lost == 1
