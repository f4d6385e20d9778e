"""CSV input: row-numbered reports of bad rows, header checks, counts files."""

from __future__ import annotations

import numpy as np
import pytest

from stream.ingest.csvio import CsvError, EventCsvReader, read_counts
from stream.pipeline import ReleasePipeline
from stream.service.testing import small_settings

S = small_settings()


def write(tmp_path, text, name="events.csv", mode="w"):
    p = tmp_path / name
    if mode == "wb":
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


def report(path, settings=S, block_size=1 << 20):
    """{line: reason} for every rejected line (reader + validation + windowing), and the accepted count."""
    pipe = ReleasePipeline(settings)
    out = {}
    for blk in EventCsvReader(path, settings, block_size=block_size):
        for r in list(blk.rejections) + list(pipe.offer(blk.batch)):
            assert r.row not in out, f"line {r.row} reported twice"
            out[r.row] = r.reason
    return out, pipe.stats.events_accepted


BAD = (
    "user_id,event_time,age,sex\n"        # 1
    "a,10,30,M\n"                          # 2 ok
    "b,20,30\n"                            # 3 missing field (short line)
    "c,,30,M\n"                            # 4 missing event time
    "d,abc,30,M\n"                         # 5 unparsable time
    "e,30,old,M\n"                         # 6 unparsable number
    "f,31,130,M\n"                         # 7 out of domain (reject)
    "g,32,30,X\n"                          # 8 out of domain (categorical)
    "\n"                                   # 9 empty line
    "h,33,30,M,extra\n"                    # 10 a field too many
    "i,1970-01-01T00:00:40Z,30,F\n"        # 11 ok (ISO time)
    "j,nan,30,F\n"                         # 12 non-finite time
    ",34,30,F\n"                           # 13 missing user id
    "k,35,30,F\n"                          # 14 ok
)


@pytest.mark.parametrize("block_size", [1 << 20, 64, 20])
def test_every_bad_row_is_reported_with_its_line_number(tmp_path, block_size):
    path = write(tmp_path, BAD)
    out, accepted = report(path, block_size=block_size)
    assert out == {
        3: "missing_field", 4: "missing_field", 5: "invalid_time", 6: "wrong_type", 7: "out_of_domain",
        8: "out_of_domain", 9: "missing_field", 10: "unknown_attribute", 12: "non_finite", 13: "missing_field",
    }
    assert accepted == 3  # lines 2, 11 and 14: nothing silently dropped
    assert accepted + len(out) == 13


def test_clip_instead_of_reject(tmp_path):
    s = small_settings(schema={"attributes": [
        {"name": "age", "kind": "numeric", "min": 0, "max": 100, "bins": 10, "out_of_range": "clip"},
        {"name": "sex", "kind": "categorical", "values": ["M", "F"]}]})
    out, accepted = report(write(tmp_path, "user_id,event_time,age,sex\na,1,130,M\nb,2,-4,F\n"), s)
    assert out == {} and accepted == 2


def test_unknown_attribute_column(tmp_path):
    path = write(tmp_path, "user_id,event_time,age,sex,zip\na,1,30,M,\nb,2,30,F,1234\nc,3,30,F,\n")
    reader = EventCsvReader(path, S)
    assert reader.unknown_columns == ["zip"]
    out, accepted = report(path)
    assert out == {3: "unknown_attribute"} and accepted == 2


def test_header_problems_are_errors(tmp_path):
    with pytest.raises(CsvError, match="lacks column"):
        EventCsvReader(write(tmp_path, "user_id,time,age,sex\na,1,30,M\n"), S)
    with pytest.raises(CsvError, match="repeats"):
        EventCsvReader(write(tmp_path, "user_id,event_time,age,sex,age\n"), S)
    with pytest.raises(CsvError, match="empty"):
        EventCsvReader(write(tmp_path, ""), S)
    with pytest.raises(CsvError, match="does not exist"):
        EventCsvReader(tmp_path / "nope.csv", S)


def test_invalid_utf8_user_id_and_values(tmp_path):
    path = write(tmp_path, b"user_id,event_time,age,sex\n\xff\xfe,1,30,M\na,2,30,\xffM\nb,3,30,M\n", mode="wb")
    out, accepted = report(path)
    assert out == {2: "invalid_user_id", 3: "out_of_domain"} and accepted == 1


def test_quoted_fields_and_crlf(tmp_path):
    path = write(tmp_path, 'user_id,event_time,age,sex\r\n"a,1",1,30,"M"\r\n"",2,30,F\r\nb,3,30,F\r\n')
    out, accepted = report(path)
    assert out == {3: "missing_field"} and accepted == 2


def test_large_file_in_many_blocks_keeps_numbering(tmp_path):
    rng = np.random.default_rng(0)
    lines = ["user_id,event_time,age,sex"]
    expected = {}
    for i in range(3000):
        line_no = i + 2
        if i % 97 == 5:
            lines.append(f"u{i},{i},30")  # short
            expected[line_no] = "missing_field"
        elif i % 89 == 7:
            lines.append(f"u{i},{i},300,M")
            expected[line_no] = "out_of_domain"
        else:
            lines.append(f"u{i},{i},{int(rng.integers(0, 100))},{'MF'[i % 2]}")
    out, accepted = report(write(tmp_path, "\n".join(lines) + "\n"), block_size=1000)
    assert out == expected and accepted == 3000 - len(expected)


def test_counts_file(tmp_path):
    header = "timestep," + ",".join(f"b{i}" for i in range(20))
    rows = [f"{t}," + ",".join(str((t * 7 + i) % 5) for i in range(20)) for t in range(3)]
    arr = read_counts(write(tmp_path, "\n".join([header, *rows]) + "\n", "c.csv"), 20)
    assert arr.shape == (3, 20) and arr.dtype == np.int64 and arr[1, 2] == (7 + 2) % 5
    no_header = "\n".join(",".join("1" for _ in range(20)) for _ in range(2)) + "\n"
    assert read_counts(write(tmp_path, no_header, "d.csv"), 20).sum() == 40
    with pytest.raises(CsvError, match="20 bins"):
        read_counts(write(tmp_path, "1,2,3\n", "e.csv"), 20)
    bad = "\n".join([header, rows[0], rows[1].replace(",3,", ",x,", 1), rows[2]]) + "\n"
    with pytest.raises(CsvError, match="line 3"):
        read_counts(write(tmp_path, bad, "f.csv"), 20)
    neg = "\n".join([header, rows[0].replace(",1,", ",-1,", 1)]) + "\n"
    with pytest.raises(CsvError, match="negative"):
        read_counts(write(tmp_path, neg, "g.csv"), 20)
    with pytest.raises(CsvError, match="line 2"):
        read_counts(write(tmp_path, header + "\n" + ",".join("1" for _ in range(15)) + "\n", "h.csv"), 20)
