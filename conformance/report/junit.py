"""junit.xml: one test suite per spec section, one test case per case, so that a CI system shows
the verdicts where it shows test results."""
from __future__ import annotations

from xml.etree import ElementTree as ET

from ..judge.verdicts import CaseResult, Verdict
from .tables import clip, section_of, section_order

def junit(doc: dict, results: list[CaseResult]) -> str:
    suites = ET.Element("testsuites", name="kvconform")
    by_group: dict[str, list[CaseResult]] = {}
    for r in results:
        by_group.setdefault(section_of(r), []).append(r)
    for name in sorted(by_group, key=section_order):
        members = by_group[name]
        suite = ET.SubElement(suites, "testsuite", name=name, tests=str(len(members)),
                              failures=str(sum(r.verdict == Verdict.FAIL for r in members)),
                              errors=str(sum(r.verdict in (Verdict.ERROR, Verdict.TIMEOUT) for r in members)),
                              skipped=str(sum(r.verdict == Verdict.NOT_SUPPORTED for r in members)),
                              time=f"{sum(r.duration_s for r in members):.3f}")
        props = ET.SubElement(suite, "properties")
        for key in ("kit_version", "spec_version", "running_version", "semantics_profile"):
            ET.SubElement(props, "property", name=key, value=str(doc[key]))
        ET.SubElement(props, "property", name="adapter", value=doc["backend"]["adapter"])
        for r in members:
            tc = ET.SubElement(suite, "testcase", classname=f"kvconform.{r.section or 'generated'}",
                               name=r.id, time=f"{r.duration_s:.3f}")
            cp = ET.SubElement(tc, "properties")
            ET.SubElement(cp, "property", name="verdict", value=str(r.verdict))
            ET.SubElement(cp, "property", name="rules", value=" ".join(r.rules))
            ET.SubElement(cp, "property", name="mandatory", value=str(r.mandatory).lower())
            text = "\n".join([r.reason] + [f.line() for f in r.failures] +
                             ([f"reproducer: {r.reproducer}"] if r.reproducer else []) +
                             ([r.stderr_tail] if r.stderr_tail else [])).strip()
            message = clip((r.first_failure().line() if r.first_failure() else r.reason) or str(r.verdict), 300)
            if r.verdict == Verdict.FAIL:
                ET.SubElement(tc, "failure", message=message, type="FAIL").text = text
            elif r.verdict in (Verdict.ERROR, Verdict.TIMEOUT):
                ET.SubElement(tc, "error", message=message, type=str(r.verdict)).text = text
            elif r.verdict == Verdict.NOT_SUPPORTED:
                ET.SubElement(tc, "skipped", message=clip(r.reason, 300))
            elif text:
                ET.SubElement(tc, "system-out").text = f"{r.verdict}: {text}"
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
