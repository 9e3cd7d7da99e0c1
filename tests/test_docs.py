"""The documentation a user of the repository reads is in the repository: every relative link in
README.md and docs/ resolves to a file inside the checkout, and the methods page states the
formulas the code implements."""
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)|`(\.\./[^`\s]+)`")


def _docs():
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_relative_links_stay_inside_the_repository():
    bad = []
    for doc in _docs():
        for m in LINK.finditer(doc.read_text(encoding="utf-8")):
            target = m.group(1) or m.group(2)
            if re.match(r"[a-z]+://", target):
                continue
            path = (doc.parent / target).resolve()
            if REPO not in path.parents or not path.exists():
                bad.append(f"{doc.relative_to(REPO)} -> {target}")
    assert bad == [], bad


def test_methods_page_states_both_methods_with_their_formulas():
    text = (REPO / "docs" / "methods.md").read_text(encoding="utf-8")
    for needle in ("## Harness-S", "## Harness-R1", "Delta_B(P) = (1/n) * sum_i (R_i^P - R_i^0)",
                   "a_{x,j} = (R(tau_{x,j}) - mean_x) / max(std_x, eps)", "rl.tis_mode",
                   "open points and our choices"):
        assert needle in text, needle
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "docs/methods.md" in readme and "shared/METHODS.md" not in readme
