"""Pools `blockpilot measure --json-out` reports of the same prompts and policies run in different
orders (e.g. the policy list reversed, so that no policy always runs first on a prompt): per policy,
seconds, tokens and steps are summed over the reports and tau averaged; the output keeps the first
report's policy order. usage: pool_measure.py OUT.json REPORT.json [REPORT.json ...]"""
import json
import sys

out, paths = sys.argv[1], sys.argv[2:]
reports = [json.load(open(p)) for p in paths]
pooled = dict(reports[0], pooled_from=paths)
policies = []
for first in reports[0]["policies"]:
    runs = [next(p for p in r["policies"] if p["policy"] == first["policy"]) for r in reports]
    seconds = {k: sum(run["seconds"][k] for run in runs) for k in first["seconds"]}
    generated = sum(run["generated"] for run in runs)
    prompts = sum(len(run["tau"]) for run in runs)
    decode = seconds["total"] - seconds["prefill"]
    policies.append(dict(first, generated=generated, steps=sum(run["steps"] for run in runs), seconds=seconds,
                         fallbacks=sum(run["fallbacks"] for run in runs),
                         mean_tau=sum(run["mean_tau"] for run in runs) / len(runs),
                         decode_tokens_per_second=(generated - prompts) / decode if decode > 0 else 0.0,
                         tokens_per_second=generated / seconds["total"] if seconds["total"] > 0 else 0.0))
pooled["policies"] = policies
json.dump(pooled, open(out, "w"), indent=2)
for p in policies:
    base = policies[0]["decode_tokens_per_second"]
    print(f"{p['policy'][-40:]:>40}  tau {p['mean_tau']:.4f}  decode {p['decode_tokens_per_second']:6.2f} t/s  "
          f"{p['decode_tokens_per_second'] / base:.3f}x  policy {1e3 * p['seconds']['policy'] / len(p['tau']) / len(paths):.3f} ms "
          f"({100 * p['seconds']['policy'] / p['seconds']['total']:.4f} %)")
