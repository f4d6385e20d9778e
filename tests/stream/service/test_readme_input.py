"""The README's input message is what the decoder accepts, and its flat variant is dead-lettered
as ``missing_field``, as the README says (issue 14 item 2, consumer guide)."""

from __future__ import annotations

import json
import re

from stream.ingest.events import EventDecoder
from stream.service.testing import small_settings
from tests.kafka_harness import ROOT


def _guide() -> str:
    text = (ROOT / "README.md").read_text()
    return text[text.index("### Reading releases"):text.index("### Input feeds")]


def test_the_readme_input_message_is_accepted_and_the_flat_one_is_missing_field():
    guide = _guide()
    (example,) = re.findall(r"\*\*Input\.\*\*.*?```json\n(.*?)```", guide, flags=re.S)
    doc = json.loads(example)
    settings = small_settings()  # schema.user_id / event_time at their defaults; age and sex attributes
    assert set(doc) == {settings.schema_.user_id, settings.schema_.event_time, "attributes"}
    flat_text = re.search(r"A flat\s+event — `(\{.*?\})`", guide, flags=re.S).group(1)
    flat = json.loads(flat_text.replace('"…"', json.dumps(doc["event_time"])))
    assert {k: v for k, v in flat.items() if k in doc} == {k: doc[k] for k in doc if k != "attributes"}

    decoder = EventDecoder.from_settings(settings)
    good = decoder.decode([example.strip().encode()], [(0, 0)])
    assert len(good.batch) == 1 and not good.rejections.counts()
    bad = decoder.decode([json.dumps(flat).encode()], [(0, 1)])
    assert len(bad.batch) == 0 and bad.rejections.counts() == {"missing_field": 1}
    assert "`missing_field`" in guide
