"""The ops page's live feed is no request on its way to a model (engines.job.on_their_way):
open for as long as the page is, it would otherwise make every lone request wait for company."""

from __future__ import annotations

from engines.job import job_scope, on_their_way
from gateway.ops.ui import ui_events


def test_opening_the_feed_leaves_no_request_on_its_way():
    before = on_their_way()
    with job_scope():  # as the HTTP layer wraps the feed's request
        assert on_their_way() == before + 1
        feed = ui_events.fn(state=None)  # the feed's body is not started: state is unread
        assert on_their_way() == before
    assert on_their_way() == before
    assert feed.headers["cache-control"] == "no-cache"
