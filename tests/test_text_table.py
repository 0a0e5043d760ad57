"""The one plain-text table layout every command prints (clsbench.core.text_table)."""

from __future__ import annotations

from clsbench.core.text_table import cut, fmt_ms, fmt_rate, text_table


def test_columns_two_spaces_apart_with_a_rule_and_right_aligned_numbers():
    lines = text_table(("model", "img/s"), [("resnet50", "1,234"), ("vit", "9.50")], right={1})
    assert lines == ["model     img/s",
                     "--------  -----",
                     "resnet50  1,234",
                     "vit        9.50"]


def test_without_a_rule_and_trailing_spaces_dropped():
    assert text_table(("a", "b"), [("x", "")], rule=False) == ["a  b", "x"]


def test_the_last_column_is_cut_to_the_width_but_not_below_its_minimum():
    rows = [("r1", "a long description of a measurement")]
    assert text_table(("id", "what"), rows, width=20) == ["id  what", "--  ----------------", "r1  a long descrip.."]
    narrow = text_table(("id", "what"), rows, width=10, min_last=12)
    assert narrow[2] == "r1  a long des.."  # 12 characters: the minimum wins over the width


def test_cut_and_number_formats():
    assert cut("abcdef", 6) == "abcdef" and cut("abcdefg", 6) == "abcd.."
    assert [fmt_rate(v) for v in (None, 1234.5, 12.34, 1.234)] == ["-", "1,234", "12.3", "1.23"]
    assert [fmt_ms(v) for v in (None, 1.23456, 12.3456, 123.456)] == ["-", "1.235", "12.35", "123.5"]
