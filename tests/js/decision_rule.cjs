// The page's decision rule (reviewers/static/reviewers/decision-rule.js) run under Node, so a
// Python test can hold it to audit.evidence.decision_rule's verdict on the same records.
//
//   node tests/js/decision_rule.cjs TRAIL.json   -> the failures as JSON on stdout
//
// TRAIL.json: {"request": {...}, "decisions": [...]}.
"use strict";
const fs = require("fs");
const path = require("path");
const script = path.join(__dirname, "..", "..", "reviewers", "static", "reviewers", "decision-rule.js");
(0, eval)(fs.readFileSync(script, "utf8"));
const { request, decisions } = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
globalThis.PathfinderDecisionRule.failures(request, decisions).then((found) => {
  process.stdout.write(JSON.stringify(found));
});
