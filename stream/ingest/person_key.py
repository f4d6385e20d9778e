"""The person key: one canonical text per person, whatever format the id arrived in.

The contribution bound (at most Δ records per person per timestep) holds per
*key*. If one person could arrive under two keys, say ``1`` from one producer
and ``"1"`` or ``"01"`` from another, that person would count twice and the
bound, and every ε built on it, would be off by that factor. So every user
id, from JSON, CSV or a Kafka record key, goes through one rule before it
becomes a key (``docs/privacy.md`` §1.2):

* a JSON integer becomes its decimal text (``1`` → ``"1"``); JSON floats and
  booleans are not ids (``wrong_type``, decided by the decoder);
* text is Unicode-normalised to NFC (``"e\\u0301"`` and ``"é"`` are one key);
* text that is an integer written with a sign, leading zeros or a zero
  fraction (``"+7"``, ``"007"``, ``"7.0"``, ``"-0"``) becomes the plain decimal
  (``"7"``, ``"0"``), so it meets the JSON integer of the same value;
* text with leading or trailing white space, or any control, format
  (e.g. zero-width space) or surrogate code point, is ``invalid_user_id``:
  such keys are invisible variations of another key.

The numeric rule is switchable (``schema.numeric_user_ids``, default on): when
ids are opaque strings (``"007"`` and ``"7"`` are two people), turn it off and
only the NFC and invisible-character rules apply.

What merging costs (``docs/privacy.md`` §1.2): people who share a key are
protected as *one* person. Merging never splits a person, but it is not free
for the others: with the smallest-(event time, bin) bounding rule, adding
person P (``"007"``) can replace the record kept for person Q (``"7"``), an L1
change of 2 where Δ = 1, i.e. a substitution that costs 2ε. Splitting one
person into two keys would be worse (their records counted twice, without
bound); every rule above merges or refuses, none splits.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["canonical_keys", "INVISIBLE_DETAIL"]

#: leading/trailing white space (ASCII or Unicode separators), or a control (Cc), format (Cf)
#: or surrogate (Cs) code point anywhere
_INVISIBLE = r"^[\s\pZ]|[\s\pZ]$|[\p{Cc}\p{Cf}\p{Cs}]"
_INTEGER_TEXT = r"^[+-]?[0-9]+(\.0*)?$"
_PLAIN_INTEGER = r"^(0|-?[1-9][0-9]*)$"
INVISIBLE_DETAIL = (
    "the user id has leading or trailing white space or an invisible (control, format or surrogate) "
    "character; send the id without them"
)


def canonical_keys(ids: pa.Array, *, numeric: bool = True) -> tuple[pa.Array, np.ndarray]:
    """``(keys, invisible)``: the canonical key of each id, and which ids are refused.

    ``numeric`` (``schema.numeric_user_ids``): integer spellings of one number become one key;
    off, ids are opaque text (NFC-normalised; invisible characters still refused).

    ``ids`` is a string array (nulls pass through as nulls). ``invisible``
    marks the ids that must be ``invalid_user_id``; their entry in ``keys`` is
    meaningless. Vectorised (Arrow compute); ids that are already plain ASCII
    without white space cost two regex scans.
    """
    if len(ids) == 0:
        return ids, np.zeros(0, dtype=bool)
    invisible = pc.match_substring_regex(ids, _INVISIBLE).fill_null(False).to_numpy(zero_copy_only=False)
    keys = ids
    if not pc.all(pc.equal(pc.string_is_ascii(ids), True)).as_py():
        keys = pc.utf8_normalize(keys, "NFC")
    if not numeric:
        return keys, np.asarray(invisible, dtype=bool)
    integer = pc.match_substring_regex(keys, _INTEGER_TEXT).fill_null(False)
    if pc.any(integer).as_py():
        plain = pc.match_substring_regex(keys, _PLAIN_INTEGER).fill_null(False)
        fix = pc.and_(integer, pc.invert(plain))
        if pc.any(fix).as_py():
            fixed = pc.replace_substring_regex(keys, r"^\+?(-?)0*([0-9]+)(?:\.0*)?$", r"\1\2")
            fixed = pc.replace_substring_regex(fixed, r"^-0$", "0")
            keys = pc.if_else(fix, fixed, keys)
    return keys, np.asarray(invisible, dtype=bool)
