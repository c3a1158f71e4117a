// The page's verifier (reviewers/static/reviewers/verify.js, with decision-rule.js) run under
// Node instead of a browser: the same files, the same WebCrypto, so a Python test can hold
// verify.js to offline_verify's verdict on many bundles without starting Chromium. The browser
// tests (tests/browser/test_desk_browser.py) run these files in the page itself.
//
//   node tests/js/verify_bundle.cjs BUNDLE.zip PINS.json   -> the verdict as JSON on stdout
//
// PINS.json: {"logKeys": [...], "witnessKeys": [...], "log": {"url": ..., "origin": ...}}.
"use strict";
const fs = require("fs");
const path = require("path");
const static_ = path.join(__dirname, "..", "..", "reviewers", "static", "reviewers");
const texts = path.join(__dirname, "..", "..", "audit", "evidence", "bundle_texts.json");
globalThis.PathfinderBundleTexts = JSON.parse(fs.readFileSync(texts, "utf8"));
for (const script of ["decision-rule.js", "verify.js"]) {
  (0, eval)(fs.readFileSync(path.join(static_, script), "utf8"));
}
const [bundle, pinsFile] = process.argv.slice(2);
const pins = JSON.parse(fs.readFileSync(pinsFile, "utf8"));
globalThis.PathfinderVerify.verify(new Uint8Array(fs.readFileSync(bundle)), pins).then((verdict) => {
  process.stdout.write(JSON.stringify(verdict));
});
