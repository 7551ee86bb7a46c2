"""The web page's two catalogues (api/static/i18n/en.json and zh-CN.json): the same keys, the same
{parameters} and `code` spans, real Chinese in every Chinese text, every key the page uses present,
and no key left unused. (The browser test checks the rendered page in Chinese.)"""

from __future__ import annotations

import re

from tests.service.web_harness import STATIC, catalogue

EN = catalogue("en")
ZH = catalogue("zh-CN")
HTML = (STATIC / "index.html").read_text(encoding="utf-8")
SCRIPTS = {path.name: path.read_text(encoding="utf-8") for path in sorted((STATIC / "js").glob("*.js"))}
CJK = re.compile(r"[\u4e00-\u9fff]")

# Keys the scripts build from a value (t(`status.${status}`) and the like): every member of each
# family must exist, and the families below are all the scripts build.
DYNAMIC = {
    "status": ["queued", "running", "succeeded", "failed", "cancelled"],
    "verdict": ["fail", "pass", "timeout", "crash", "infra-error", "pending"],
    "iter.cached": ["farm", "job"],
    "workers.state": ["idle", "busy", "offline"],
    "job.releases.state": ["pass", "fail", "unknown"],  # a bisect-releases job's strip (job.js)
    # an iteration's phase cell takes its tooltip from the legend's entries (index.html #phase-legend)
    "phase": re.findall(r'data-i18n="phase\.([a-z0-9-]+)"', HTML),
}
# Keys chosen by a variable in a script (not as a literal t("...") argument).
CHOSEN = {
    "summary.single",
    "summary.single_no_good",
    "graphs.count.one",
    "graphs.col.node",
    "graphs.col.op",
    "graphs.input",
    "graphs.output",
}


def used_keys() -> set[str]:
    keys = set(re.findall(r'data-i18n="([^"]+)"', HTML))
    for attrs in re.findall(r'data-i18n-attr="([^"]+)"', HTML):
        keys |= {pair.split("=")[1].strip() for pair in attrs.split(",")}
    for text in SCRIPTS.values():
        keys |= set(re.findall(r'\bt\("([^"]+)"', text))
    for family, members in DYNAMIC.items():
        keys |= {f"{family}.{member}" for member in members}
    return keys | CHOSEN


def test_both_catalogues_have_the_same_keys() -> None:
    assert sorted(EN) == sorted(ZH)
    assert all(isinstance(v, str) and v.strip() for v in [*EN.values(), *ZH.values()])


def test_every_key_the_page_uses_is_translated_and_none_is_unused() -> None:
    used = used_keys()
    assert sorted(used - set(EN)) == []
    assert sorted(set(EN) - used) == []


def test_dynamic_keys_are_only_the_listed_families() -> None:
    built = set()
    for text in SCRIPTS.values():
        built |= set(re.findall(r"\bt\(`([a-z_.-]+)\.\$\{", text))
    assert built == set(DYNAMIC)


def test_chinese_texts_are_chinese_with_the_same_parameters_and_code() -> None:
    for key, english in EN.items():
        chinese = ZH[key]
        assert CJK.search(chinese), f"{key}: {chinese!r} has no Chinese"
        assert sorted(re.findall(r"\{\w+\}", english)) == sorted(re.findall(r"\{\w+\}", chinese)), key
        assert re.findall(r"`([^`]*)`", english) == re.findall(r"`([^`]*)`", chinese), key


def test_chinese_uses_the_reference_guide_terms() -> None:
    """The terms of the Chinese `debug reduce` guide: 缩减 (reduce), 最小失败模型 / 最小通过模型
    (min-bad / min-good), 黄金值 (golden values), 容差 (tolerance), 迭代 (iteration)."""
    assert "最小失败模型" in ZH["job.download.min_bad"] and "最小通过模型" in ZH["job.download.min_good"]
    assert ZH["new.golden"] == "黄金值" and ZH["new.tolerance"] == "容差"
    assert "缩减" in ZH["new.reduction"] and "迭代" in ZH["iter.caption"]
