"""`ragkb tune`: the lines that report a tune job's result (its folds, the held-out gain with its interval, the
recommendation) and an applied version."""

from __future__ import annotations

from ragkb_cli.api import Json


def tune_lines(kb: Json, result: Json) -> list[str]:
    held_out = result["held_out"]
    lines = [
        f"tune of {kb['name']} ({kb['id']}) on question set {result['question_set_id']}: "
        f"{result['queries']} questions, {result['folds']} folds, {result['candidates']} settings, "
        f"legs {result['leg_depth']} deep",
        f"current: {result['current']['label']}  nDCG@10 {result['current_ndcg_at_10']:.4f}",
        "",
        f"{'fold':>4}  {'queries':>7}  {'winner (chosen on the other folds)':<48}  {'winner':>7}  {'current':>7}  "
        f"{'gain':>7}",
    ]
    for fold in result["fold_results"]:
        lines.append(
            f"{fold['fold']:>4}  {fold['queries']:>7}  {fold['winner']['label']:<48}  "
            f"{fold['winner_ndcg_at_10']:>7.4f}  {fold['current_ndcg_at_10']:>7.4f}  {fold['gain']:>+7.4f}"
        )
    lines += [
        "",
        f"held-out nDCG@10: {held_out['winner_ndcg_at_10']:.4f} against {held_out['current_ndcg_at_10']:.4f} now; "
        f"gain {held_out['gain']:+.4f}, {held_out['confidence']:.0%} CI [{held_out['ci_low']:+.4f}, "
        f"{held_out['ci_high']:+.4f}] ({held_out['wins']} better, {held_out['losses']} worse, "
        f"{held_out['ties']} the same)",
        f"recommended: {result['recommended']['label']}  nDCG@10 {result['recommended_ndcg_at_10']:.4f} on all "
        "questions" + ("" if result["changes"] else " (the current settings: nothing to apply)"),
    ]
    check = result.get("search_check")
    if check:
        lines.append(f"check: {check['identical']} of {check['queries']} computed answers equal the search's")
    return lines


def applied_line(version: Json) -> str:
    return f"applied as settings version {version['version']} (revert: POST .../settings/versions/N/revert)"
