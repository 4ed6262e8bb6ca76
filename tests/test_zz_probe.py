import pytest
import bot.gateway as gw
from tests.test_wechat_e2e import test_ilink_message_arriving_during_shutdown_is_answered_after_the_restart as t, ilink, settings_for, data_dir  # noqa

_orig = gw.Gateway.stop
async def stop(self, timeout=60.0):
    for ch in self.channels.values():
        f = getattr(ch, "stop_receiving", None)
        if f: await f()
    await _orig(self, timeout)

@pytest.fixture(autouse=True)
def patch(monkeypatch):
    monkeypatch.setattr(gw.Gateway, "stop", stop)

test_fixed_shutdown = pytest.mark.xfail(False)(t)
