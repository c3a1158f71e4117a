/* Pathfinder bundle verifier, in the reviewer's own browser.

   A second, independent implementation of docs/audit-format.md (the first is Python's
   audit.evidence.offline_verify): it checks a downloaded bundle, a one-trail bundle or a matter bundle,
   against keys the reviewer pinned, with nothing but WebCrypto (SHA-256, Ed25519). No library,
   no network: the server's word is not needed, and nothing here asks for it.

   Checks, each reported by name: the zip rebuilds byte for byte; the members are the format's;
   the manifest is canonical and every hash matches; per trail, the records are canonical and
   chain from the genesis hash, the ledger leaf seals that chain, the leaf's inclusion proof
   leads to the checkpoint's root, every decision obeys the rule its numbers force
   (decision-rule.js, which the page loads first), the disclosed texts match their salted digests (and, in a
   matter bundle, the trail is the one listed, of the matter); the checkpoint is signed by a
   pinned log key; every pinned witness cosigned it; README.txt and verification.txt are what the
   other members make (bundle format 4; report.pdf is left to offline_verify, and the verdict
   says so).

   PathfinderVerify.verify(bytes, {logKeys: [...], witnessKeys: [...]}) resolves to
   {ok, kind, checks: [{name, ok, failures, detail}]} and never rejects; the page's form runs it
   in verify-worker.js, under a size and a time limit. */
(function () {
  "use strict";

  const enc = new TextEncoder();
  const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

  // --- bytes -------------------------------------------------------------------------------

  function concat(...parts) {
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) { out.set(p, at); at += p.length; }
    return out;
  }
  const utf8 = (s) => enc.encode(s);
  const NUL = new Uint8Array([0]);
  function equal(a, b) {
    if (a.length !== b.length) return false;
    for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
    return true;
  }
  const hex = (b) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  function unhex(s) {
    if (typeof s !== "string" || !/^([0-9a-f]{2})*$/.test(s)) throw new Error("not lowercase hex");
    return new Uint8Array(s.match(/../g)?.map((h) => parseInt(h, 16)) ?? []);
  }
  function unbase64(s) {  // strict: standard alphabet, padded, and must re-encode the same
    const raw = atob(s);
    const bytes = Uint8Array.from(raw, (c) => c.charCodeAt(0));
    if (btoa(raw) !== s) throw new Error("base64 does not re-encode to the same text");
    return bytes;
  }
  const sha256 = async (...parts) =>
    new Uint8Array(await crypto.subtle.digest("SHA-256", concat(...parts)));
  const text = (bytes) => strictUtf8.decode(bytes);
  const HEX64 = /^[0-9a-f]{64}$/, UTC_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;
  async function matterTag(matterKey, trailId) {  // audit.evidence.matter_leaves.matter_tag
    const key = await crypto.subtle.importKey("raw", unhex(matterKey), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    return hex(new Uint8Array(await crypto.subtle.sign("HMAC", key, concat(utf8("PF-MATTER-TAG-v1"), NUL, utf8(trailId)))));
  }
  async function batchTag(matterKey, trailId, batchId) {  // audit.evidence.matter_leaves.batch_tag
    const key = await crypto.subtle.importKey("raw", unhex(matterKey), { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
    return hex(new Uint8Array(await crypto.subtle.sign("HMAC", key, concat(utf8("PF-BATCH-TAG-v1"), NUL, utf8(trailId), NUL, utf8(batchId)))));
  }
  // audit.evidence.matter_leaves.Selection.holds: true, false, or null when nothing signed tells.
  async function selectionHolds(sel, sealed, matterKey, submittedAt = null, firstLineAt = null) {
    const verdicts = [];
    const submitted = "submitted_at" in sealed ? sealed.submitted_at : submittedAt;
    const sealedAt = sealed.sealed_at;
    if (sel.since !== null || sel.until !== null) {
      if (typeof submitted === "string") {
        const day = submitted.slice(0, 10);
        verdicts.push((sel.since === null || sel.since <= day) && (sel.until === null || day <= sel.until));
      } else if (typeof sealedAt === "string" && sel.since !== null && sealedAt.slice(0, 10) < sel.since) verdicts.push(false);
      else verdicts.push(null);
    }
    if (sel.batch !== null) {
      if (typeof sealed.batch_tag === "string") verdicts.push(sealed.batch_tag === await batchTag(matterKey, sealed.trail, sel.batch));
      else if (typeof sealedAt === "string" && firstLineAt !== null && sealedAt < firstLineAt) verdicts.push(false);
      else verdicts.push(null);
    }
    if (verdicts.includes(false)) return false;
    return verdicts.includes(null) ? null : true;
  }
  const LEFT_OUT_CODES = ["open", "sealed_after_checkpoint", "no_request", "outside_selection"];
  const LEGACY_REASONS = [["still open", "open"], ["sealed after the checkpoint", "sealed_after_checkpoint"], ["outside the selection", "outside_selection"]];
  const leftOutOf = (matter) => (Array.isArray(matter.left_out) ? matter.left_out : []).filter((e) => e && typeof e === "object");
  function reasonsOf(matter) {  // offline_verify._reasons: format 2 wrote its reasons as text
    if (matter.format_version >= 3) return leftOutOf(matter);
    return leftOutOf(matter).map((e) => ({ ...e, reason: (LEGACY_REASONS.find(([p]) => String(e.reason).startsWith(p)) ?? [null, e.reason])[1] }));
  }
  function selectionOfMatter(matter) {  // offline_verify._selection
    let batch = matter.batch ?? null;
    if (matter.format_version < 3) {
      const named = leftOutOf(matter).map((e) => /not a line of batch (\S+)$/.exec(String(e.reason))).find((x) => x);
      batch = named ? named[1] : null;
    }
    return { since: matter.since ?? null, until: matter.until ?? null, batch };
  }

  // --- canonical JSON (records, manifest) and the bundle's JSON form (other members) ---------

  const SHORT = { 8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r" };
  function canonString(s) {
    let out = '"';
    for (const ch of s) {
      const c = ch.codePointAt(0);
      if (ch === '"') out += '\\"';
      else if (ch === "\\") out += "\\\\";
      else if (c < 0x20) out += SHORT[c] ?? "\\u00" + c.toString(16).padStart(2, "0");
      else if (c >= 0xd800 && c <= 0xdfff) throw new Error("a lone surrogate");
      else out += ch;
    }
    return out + '"';
  }
  function canonical(v) {
    if (v === null || v === true || v === false) return String(v);
    if (typeof v === "number") {
      if (!Number.isSafeInteger(v)) throw new Error("a number that is not an I-JSON integer");
      return String(v);
    }
    if (typeof v === "string") return canonString(v);
    if (Array.isArray(v)) return "[" + v.map(canonical).join(",") + "]";
    const keys = Object.keys(v).sort();
    return "{" + keys.map((k) => canonString(k) + ":" + canonical(v[k])).join(",") + "}";
  }
  function isCanonical(s) {
    try { return canonical(JSON.parse(s)) === s; } catch { return false; }
  }
  function sortedDeep(v) {
    if (Array.isArray(v)) return v.map(sortedDeep);
    if (v && typeof v === "object") {
      return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortedDeep(v[k])]));
    }
    return v;
  }
  // Python's json.dumps(v, sort_keys=True, indent=2, ensure_ascii=False) + "\n".
  const memberForm = (v) => JSON.stringify(sortedDeep(v), null, 2) + "\n";

  // --- the deterministic zip -------------------------------------------------------------------

  const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  function crc32(bytes) {
    let c = 0xffffffff;
    for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  }
  function readZip(data) {  // [[name, bytes]] in central-directory order
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    let eocd = data.length - 22;
    while (eocd >= 0 && view.getUint32(eocd, true) !== 0x06054b50) eocd--;
    if (eocd < 0) throw new Error("no end of central directory: not a zip");
    const count = view.getUint16(eocd + 10, true);
    const directory = view.getUint32(eocd + 16, true);
    let at = directory, end = 0;  // members lie in order, apart, before the central directory
    const members = [];
    for (let i = 0; i < count; i++) {
      if (view.getUint32(at, true) !== 0x02014b50) throw new Error("a broken central directory");
      const method = view.getUint16(at + 10, true);
      const size = view.getUint32(at + 20, true);
      const nameLen = view.getUint16(at + 28, true);
      const extraLen = view.getUint16(at + 30, true);
      const commentLen = view.getUint16(at + 32, true);
      const local = view.getUint32(at + 42, true);
      const name = text(data.subarray(at + 46, at + 46 + nameLen));
      if (method !== 0) throw new Error(`member ${name} is compressed; bundle members are stored`);
      if (local < end || view.getUint32(local, true) !== 0x04034b50) throw new Error(`member ${name} overlaps another or has no local header`);
      const start = local + 30 + view.getUint16(local + 26, true) + view.getUint16(local + 28, true);
      end = start + size;
      if (end > directory) throw new Error(`member ${name} runs past the central directory`);
      members.push([name, data.subarray(start, start + size)]);
      at += 46 + nameLen + extraLen + commentLen;
    }
    return members;
  }
  function deterministicZip(members) {  // docs/audit-format.md, "The zip is deterministic"
    const local = [], central = [];
    let offset = 0;
    for (const [name, data] of members) {
      const raw = utf8(name);
      const common = new DataView(new ArrayBuffer(26));
      [20, 0, 0, 0, 0x21].forEach((v, i) => common.setUint16(i * 2, v, true));
      common.setUint32(10, crc32(data), true);
      common.setUint32(14, data.length, true);
      common.setUint32(18, data.length, true);
      common.setUint16(22, raw.length, true);
      common.setUint16(24, 0, true);  // extra field length
      const fields = new Uint8Array(common.buffer);
      const header = concat(new Uint8Array([0x50, 0x4b, 3, 4]), fields, raw, data);
      const tail = new DataView(new ArrayBuffer(16));
      tail.setUint32(8, 0o644 << 16, true);  // external attributes; comment, disk, internal: 0
      tail.setUint32(12, offset, true);
      central.push(concat(new Uint8Array([0x50, 0x4b, 1, 2, 20, 3]), fields.subarray(0, 24),
        new Uint8Array(tail.buffer).subarray(0, 2), new Uint8Array(tail.buffer).subarray(2), raw));
      local.push(header);
      offset += header.length;
    }
    const dir = concat(...central);
    const end = new DataView(new ArrayBuffer(22));
    end.setUint32(0, 0x06054b50, true);
    end.setUint16(8, members.length, true);
    end.setUint16(10, members.length, true);
    end.setUint32(12, dir.length, true);
    end.setUint32(16, offset, true);
    return concat(...local, dir, new Uint8Array(end.buffer));
  }

  // --- the format's names ------------------------------------------------------------------------

  // Bundle format 6 adds receipt.cose and destruction.json to each trail; 3 to 5 had neither, 2
  // no report.pdf either (audit.evidence.bundle_format).
  const FORMAT6_MEMBERS = ["receipt.cose", "destruction.json"];
  const TRAIL_MEMBERS = ["records.jsonl", "chain.json", "ledger-leaf.json", "inclusion-proof.json",
    "disclosures.json", "prompt.txt", "answer.txt", "models.json", "params.json", ...FORMAT6_MEMBERS];
  const TRAIL_MEMBERS_V5 = TRAIL_MEMBERS.filter((n) => !FORMAT6_MEMBERS.includes(n));
  const TRAIL_BUNDLE = ["records.jsonl", "chain.json", "ledger-leaf.json", "inclusion-proof.json",
    "checkpoint.txt", "checkpoint.tsr", "verifier-key.txt", "disclosures.json", "prompt.txt",
    "answer.txt", "models.json", "params.json", ...FORMAT6_MEMBERS, "report.pdf", "verification.txt",
    "README.txt", "manifest.json"];
  const TRAIL_BUNDLE_V5 = TRAIL_BUNDLE.filter((n) => !FORMAT6_MEMBERS.includes(n));
  const TRAIL_BUNDLE_V2 = TRAIL_BUNDLE_V5.filter((n) => n !== "report.pdf");
  const matterNames = (ids, own = TRAIL_MEMBERS) => ["matter.json", "checkpoint.txt", "checkpoint.tsr",
    "verifier-key.txt", ...ids.flatMap((id) => own.map((n) => `trails/${id}/${n}`)),
    "report.pdf", "verification.txt", "README.txt", "manifest.json"];
  const TEXT_MEMBERS = { "prompt.rendered": "prompt.txt", "answer.text": "answer.txt" };

  // --- README.txt and verification.txt, made from the other members (bundle format 4) ---------
  // A port of audit.evidence.descriptive: the README templates are the same file (audit/evidence/bundle_texts.json,
  // which the page carries); report.pdf is laid out by ReportLab, which only offline_verify runs.

  const fill = (template, values) => template.replace(/\{([a-z_]+)\}/g, (_, key) => {
    if (!(key in values)) throw new Error(`no value for {${key}}`);
    return String(values[key]);
  });
  const quoted = (s) => JSON.stringify(s);
  const CLAIMS_HEAD = ["Claims of this bundle, each checked by python -m audit.offline_verify (the service",
    "checked them against its store before it exported the bundle):"];

  function trailFacts(m, prefix) {
    const chain = JSON.parse(text(m.get(prefix + "chain.json")));
    const leaf = JSON.parse(text(m.get(prefix + "ledger-leaf.json")));
    const sealed = JSON.parse(leaf.payload);
    const lines = text(m.get(prefix + "records.jsonl")).split("\n");
    const payloads = lines.at(-1) === "" ? lines.slice(0, -1).map((l) => JSON.parse(l)) : [];
    const request = payloads.find((p) => p && typeof p === "object" && p.kind === "request");
    const attempt = request?.attempt;
    const stated = m.has(prefix + "destruction.json") ? JSON.parse(text(m.get(prefix + "destruction.json"))) : {};
    return { trailId: chain.trail_id, jobId: sealed.job, outcome: sealed.outcome,
      attempt: attempt === undefined || attempt === null ? null : attempt, leafIndex: leaf.index,
      count: payloads.length, head: chain.head_hash, formatVersion: chain.format_version,
      direction: request?.direction, destruction: stated?.destroyed === true ? stated : null,
      receipt: Boolean(m.get(prefix + "receipt.cose")?.length) };
  }
  function directionSaid(f) {  // trail_facts.TrailFacts.direction_said
    const d = f.direction;
    if (!d || typeof d !== "object" || Array.isArray(d)) return "Who directed it: its request record does not say.";
    const said = (k) => (typeof d[k] === "string" ? quoted(d[k]) : "not given");
    return `Who directed it, as its request record states: API key ${said("key")}, the key's owner ${said("key_owner")}, `
      + `directed by ${said("directed_by")}, confidentiality designation ${said("designation")}.`;
  }
  const destroyedSaid = (f) => (f.destruction  // descriptive.destroyed_of
    ? ` Its texts were destroyed on ${f.destruction.destroyed_at} under the order ${quoted(f.destruction.order)} (destruction.json).` : "");
  function signedOf(m) {
    const note = text(m.get("checkpoint.txt"));
    const { origin, size } = parseNote(note);
    const lines = note.split("\n").filter((l) => l.startsWith("\u2014 ")).map((l) => l.slice(2).split(" "));
    const signers = lines.map((words) => words[0]);
    // checkpoints.line_of_key: the lines that name the key in verifier-key.txt (name and key id)
    const key = text(m.get("verifier-key.txt") ?? new Uint8Array()).trim().split("+");
    const mine = lines.map((words) => {
      if (words.length !== 2 || key.length < 3 || words[0] !== key[0]) return false;
      try { return hex(unbase64(words[1]).subarray(0, 4)) === key[1]; } catch { return false; }
    });
    return { origin, size, signers, bundled: signers.filter((_, i) => mine[i]),
      others: signers.filter((_, i) => !mine[i]) };
  }
  function signersText(s, format) {  // descriptive.Signed.signed_by
    if (format < 5) return s.signers.join(", ");
    let said = s.bundled.length ? `the key in verifier-key.txt (${s.bundled.join(", ")})` : "no line of the key in verifier-key.txt";
    if (s.others.length) said += `; it also carries signature lines named ${s.others.join(", ")}, which no check here verifies (each is a witness's only where --witness-key pins its key)`;
    return said;
  }
  function trailClaims(f, format) {  // descriptive._trail_claims
    const claims = [`- trail ${f.trailId} (job ${f.jobId}, ${f.attempt === null ? "no attempt recorded" : "attempt " + f.attempt}): `
      + `${f.count} records chained from its genesis to head ${f.head}; ledger entry ${f.leafIndex} seals that count `
      + `and head with outcome "${f.outcome}" and is in the checkpoint's tree`];
    if (format < 6) return claims;
    if (f.receipt) claims.push(`- its receipt.cose is an RFC 9942 COSE receipt of ledger entry ${f.leafIndex} under the checkpoint's root, signed by the key in verifier-key.txt`);
    if (f.destruction) claims.push(`- its destruction.json states that its texts were destroyed on ${f.destruction.destroyed_at} under the order ${quoted(f.destruction.order)}, and it discloses none of them`);
    return claims;
  }
  const readmeTemplate = (texts, kind, format) => texts[format >= 6 ? `${kind}_6` : format >= 5 ? `${kind}_5` : kind];
  const checkpointClaim = (s, format) => `- the checkpoint states a tree of ${s.size} trails of log ${quoted(s.origin)}, `
    + `signed by ${signersText(s, format) || "nobody"}`;
  function selectionOf(matter) {
    const { since, until, batch } = matter;
    const days = since || until ? ` from ${since || "the first job"} to ${until || "the last"} (UTC, inclusive)` : "";
    const lines = batch !== undefined && batch !== null ? ` that were lines of batch ${quoted(batch)}` : "";
    return `every trail of matter ${quoted(matter.matter)}${lines}${days}`;
  }
  function trailTexts(m, texts, format) {  // -> {"verification.txt": ..., "README.txt": ...}
    const f = trailFacts(m, ""), s = signedOf(m);
    const verification = [...CLAIMS_HEAD, ...trailClaims(f, format), checkpointClaim(s, format)].join("\n") + "\n";
    const disclosures = JSON.parse(text(m.get("disclosures.json")));
    const withheld = Object.keys(disclosures).filter((n) => {
      const e = disclosures[n];
      return e && typeof e === "object" && Object.keys(e).length === 1 && e.withheld === true;
    }).sort();
    const readme = fill(readmeTemplate(texts, "trail_readme", format), { trail_id: f.trailId, job_id: f.jobId,
      attempt: f.attempt === null ? "not recorded" : f.attempt, record_count: f.count,
      format_version: f.formatVersion, outcome: f.outcome, origin: s.origin, tree_size: s.size,
      withheld: withheld.length ? ` Withheld: ${withheld.join(", ")}.` : "", destroyed: destroyedSaid(f),
      direction: directionSaid(f), verification,
      reportlab: texts.reportlab });
    return { "verification.txt": verification, "README.txt": readme };
  }
  const LEFT_OUT_REASONS = {  // descriptive._LEFT_OUT_REASONS
    1: "still open, or sealed after the checkpoint",
    2: "still open, sealed after the checkpoint, or submitted outside the selection",
    3: "open, sealed after the checkpoint, sealed with no request, or outside the selection: "
      + "with --log each is checked against the log",
  };
  function matterTexts(m, texts, format) {
    const matter = JSON.parse(text(m.get("matter.json"))), s = signedOf(m);
    const trails = matter.trails.map((t) => trailFacts(m, `trails/${t.trail_id}/`));
    const leftOut = matter.left_out.length;
    const verification = [...CLAIMS_HEAD,
      `- ${trails.length} trail(s) of matter ${quoted(matter.matter)}, each with a request record naming that matter`,
      ...trails.flatMap((f) => trailClaims(f, format)), checkpointClaim(s, format),
      `- ${leftOut} trail(s) left out, listed in matter.json with the reason`].join("\n") + "\n";
    const destroyed = trails.filter((f) => f.destruction).length;
    const readme = fill(readmeTemplate(texts, "matter_readme", format), { matter: quoted(matter.matter),
      selection: selectionOf(matter), trails: trails.length, origin: s.origin, tree_size: s.size,
      left_out: leftOut ? `\n${leftOut} trail(s) of the selection are left out and listed in matter.json `
        + `with the reason (${LEFT_OUT_REASONS[matter.format_version]}).` : "",
      destroyed: destroyed ? `\n${destroyed} trail(s) had their texts destroyed under an order; each one's destruction.json says when and under which.` : "",
      completeness: texts[`matter_completeness_${matter.format_version}`],
      verification, reportlab: texts.reportlab });
    return { "verification.txt": verification, "README.txt": readme };
  }
  // README.txt and verification.txt byte for byte; report.pdf is left to offline_verify, and
  // the verdict says so. Formats 2 and 3 proved none of the three (offline_verify's rule).
  function checkDescriptive(m, isMatter, format, others, texts, check) {
    const three = "README.txt, verification.txt or report.pdf";
    if (format === null) { check.fail("the bundle format is unknown (see the manifest check)"); return; }
    if (format < 4) {
      check.fail(`bundle format ${format} does not let a verifier prove ${three}: ask for a new export (format 5)`);
      return;
    }
    if (others.some((c) => !c.ok)) { check.skipped = true; check.detail = "not made again: the evidence failed the checks above"; return; }
    if (!texts) { check.fail("this page carries no README templates (audit/evidence/bundle_texts.json)"); return; }
    let made;
    try { made = isMatter ? matterTexts(m, texts, format) : trailTexts(m, texts, format); } catch (e) {
      check.fail(`cannot make README.txt, verification.txt and report.pdf again: ${e.message}`);
      return;
    }
    for (const name of ["README.txt", "verification.txt"]) {
      if (!equal(m.get(name) ?? new Uint8Array(), utf8(made[name]))) check.fail(`${name} is not what the bundle's evidence makes (audit.evidence.descriptive)`);
    }
    if (check.ok) check.detail = "README.txt and verification.txt are what the evidence makes, byte for byte; report.pdf is made again only by python -m audit.offline_verify (ReportLab), not in this browser";
  }

  // --- the checks ------------------------------------------------------------------------------

  class Check {  // as offline_verify's: `skipped` is a check that could not run, counted apart
    constructor(name) { this.name = name; this.failures = []; this.detail = ""; this.skipped = false; }
    fail(reason) { this.failures.push(reason); }
    get ok() { return this.failures.length === 0; }
  }

  function json(members, name, check) {  // a JSON member, which must be in the bundle's form
    const bytes = members.get(name);
    if (!bytes) { check.fail(`${name} is missing`); return null; }
    try {
      const s = text(bytes);
      const value = JSON.parse(s);
      if (memberForm(value) !== s) check.fail(`${name} is not in the bundle's JSON form`);
      return value;
    } catch (e) { check.fail(`${name} is not valid JSON (${e.message})`); return null; }
  }

  async function checkChain(m, check) {  // -> {trailId, head, count, payloads} or null
    const meta = json(m, "chain.json", check);
    const recordsBytes = m.get("records.jsonl");
    if (!meta || !recordsBytes) { if (!recordsBytes) check.fail("records.jsonl is missing"); return null; }
    const lines = text(recordsBytes).split("\n");
    if (lines.pop() !== "") check.fail("records.jsonl must end with a newline");
    const trailId = meta.trail_id;
    let prev = hex(await sha256(utf8("PF-GENESIS-v1"), NUL, utf8(trailId)));
    if (meta.genesis_hash !== prev) check.fail("genesis_hash is not SHA-256 of the trail id");
    const rows = meta.records || [];
    if (rows.length !== lines.length) check.fail(`chain.json lists ${rows.length} records, records.jsonl holds ${lines.length}`);
    const payloads = [];
    for (let seq = 0; seq < Math.min(rows.length, lines.length); seq++) {
      const row = rows[seq], payload = lines[seq];
      if (row.seq !== seq) check.fail(`record ${seq}: seq ${row.seq}`);
      if (!isCanonical(payload)) check.fail(`seq ${seq}: payload is not canonical JSON`);
      if (row.prev_hash !== prev) check.fail(`seq ${seq}: prev_hash does not link to the record before`);
      const digest = hex(await sha256(utf8("PF-RECORD-v1"), NUL, utf8(trailId), NUL,
        utf8(String(seq)), NUL, utf8(row.prev_hash), NUL, utf8(payload)));
      if (row.record_hash !== digest) check.fail(`seq ${seq}: record_hash does not recompute`);
      prev = digest;
      try { payloads.push(JSON.parse(payload)); } catch { payloads.push(null); }
    }
    if (meta.head_hash !== prev) check.fail("head_hash is not the last record's hash");
    if (meta.record_count !== lines.length) check.fail("record_count is not the number of records");
    const stated = payloads.find((p) => p && typeof p === "object" && p.kind === "request")?.batch_line;
    const problem = stated === undefined ? null : batchLineProblem(stated);
    if (problem) check.fail(`request record's batch_line ${problem}`);
    if (check.ok) check.detail = `${lines.length} records chain from the genesis hash of ${trailId}`
      + (stated === undefined ? "" : `; its request record names it ${batchLineSaid(stated)}`);
    return { trailId, head: prev, count: lines.length, payloads };
  }
  function batchLineProblem(stated) {  // audit.evidence.binding.batch_line_problem
    if (!stated || typeof stated !== "object" || Array.isArray(stated)
      || Object.keys(stated).sort().join() !== "batch,custom_id,line") return "must be exactly {batch, line, custom_id}";
    if (typeof stated.batch !== "string" || !stated.batch) return "batch must be a batch id";
    if (!Number.isInteger(stated.line) || stated.line < 1) return "line must be a line number (1 or more)";
    if (stated.custom_id !== null && typeof stated.custom_id !== "string") return "custom_id must be a string or null";
    return null;
  }
  const batchLineSaid = (s) => `${s.custom_id === null ? "no custom_id" : "custom_id " + JSON.stringify(s.custom_id)}, line ${s.line} of batch ${s.batch}`;

  async function checkLeafAndProof(m, chain, checkpoint, leafCheck, hashCheck, proofCheck) {
    const leaf = json(m, "ledger-leaf.json", leafCheck);
    const proof = json(m, "inclusion-proof.json", proofCheck);
    const unhashed = "no usable ledger leaf and inclusion proof to hash (see the checks above)";
    if (!leaf || !proof) { hashCheck.fail(unhashed); return null; }
    if (!isCanonical(leaf.payload)) { leafCheck.fail("ledger payload is not canonical JSON"); hashCheck.fail(unhashed); return null; }
    const sealed = JSON.parse(leaf.payload);
    if (chain) {
      if (sealed.trail !== chain.trailId) leafCheck.fail(`ledger leaf seals trail ${sealed.trail}, not ${chain.trailId}`);
      if (sealed.records !== chain.count) leafCheck.fail(`ledger leaf seals ${sealed.records} records; the bundle has ${chain.count}`);
      if (sealed.head !== chain.head) leafCheck.fail("ledger leaf seals another head hash than the records' head");
    }
    const leafHash = await sha256(NUL, utf8(leaf.payload));
    if (hex(leafHash) !== proof.leaf_hash) hashCheck.fail("leaf_hash is not SHA-256(0x00 || ledger payload)");
    else hashCheck.detail = `SHA-256(0x00 || payload) = ${proof.leaf_hash}`;
    if (proof.leaf_index !== leaf.index) proofCheck.fail(`proof is for leaf ${proof.leaf_index}, the ledger leaf is entry ${leaf.index}`);
    const keys = Object.keys(sealed).sort().join(",");
    if (keys !== "head,job,outcome,records,trail,v" && keys !== "head,job,matter_tag,outcome,records,sealed_at,trail,v"
      && keys !== "batch_tag,head,job,matter_tag,outcome,records,sealed_at,submitted_at,trail,v") leafCheck.fail("ledger payload must hold exactly v, trail, job, records, head, outcome (and, sealed since the matter tags, matter_tag and sealed_at; since matter format 3, submitted_at and batch_tag too)");
    if (!["succeeded", "cancelled", "failed", "abandoned"].includes(sealed.outcome)) leafCheck.fail(`ledger leaf's outcome ${JSON.stringify(sealed.outcome)} is none of succeeded, cancelled, failed, abandoned`);
    if ("sealed_at" in sealed && !UTC_TIME.test(String(sealed.sealed_at))) leafCheck.fail("ledger leaf's sealed_at is not a UTC time");
    if ("submitted_at" in sealed) {
      const tagged = sealed.matter_tag !== null;
      const request = chain?.payloads.find((p) => p && p.kind === "request");
      if ((sealed.submitted_at !== null) !== tagged || (sealed.batch_tag !== null) !== tagged) leafCheck.fail("a leaf carries submitted_at and batch_tag exactly when it carries a tag");
      else if (tagged && !(UTC_TIME.test(String(sealed.submitted_at)) && HEX64.test(String(sealed.batch_tag)))) leafCheck.fail("ledger leaf's submitted_at is not a UTC time or its batch_tag not hex");
      if (request && sealed.submitted_at !== request.submitted_at) leafCheck.fail("ledger leaf's submitted_at is not the request record's");
    }
    if ("matter_tag" in sealed) {
      const request = chain?.payloads.find((p) => p && p.kind === "request");
      if (!request !== (sealed.matter_tag === null)) leafCheck.fail("a leaf carries a matter tag exactly when its trail recorded a request");
      else if (sealed.matter_tag !== null && !HEX64.test(String(sealed.matter_tag))) leafCheck.fail("ledger leaf's matter_tag is not a SHA-256 hex digest");
    }
    if (leafCheck.ok) leafCheck.detail = `entry ${leaf.index} seals this trail (job ${sealed.job}, ${sealed.outcome})`;
    if (checkpoint) {
      if (proof.tree_size !== checkpoint.size) proofCheck.fail(`proof is for a tree of ${proof.tree_size}; the checkpoint is of ${checkpoint.size}`);
      let path;
      try { path = proof.proof.map(unhex); } catch { proofCheck.fail("proof hashes must be lowercase hex"); return sealed; }
      if (!(await inclusionOk(proof.leaf_index, checkpoint.size, leafHash, path, checkpoint.root))) {
        proofCheck.fail(`the inclusion proof of leaf ${proof.leaf_index} does not lead to the checkpoint's root`);
      }
    } else proofCheck.fail("no readable checkpoint to check the proof against");
    if (proofCheck.ok) proofCheck.detail = `leaf ${proof.leaf_index} is in the tree of ${checkpoint.size}`;
    return { ...sealed, index: leaf.index };
  }

  // --- completeness against the log's tiles (audit.evidence.matter_leaves) ----------------

  function entriesPath(index, width) {  // tile/entries/<N>[.p/<W>], N in x-prefixed 3-digit parts
    let digits = String(index).padStart(3, "0");
    digits = "0".repeat((3 - (digits.length % 3)) % 3) + digits;
    const parts = digits.match(/.../g);
    const encoded = parts.map((p, i) => (i < parts.length - 1 ? "x" + p : p)).join("/");
    return `tile/entries/${encoded}${width < 256 ? ".p/" + width : ""}`;
  }
  async function treeHash(hashes) {  // RFC 9162 MTH of leaf hashes
    if (hashes.length === 0) return sha256();
    if (hashes.length === 1) return hashes[0];
    let k = 1;
    while (k * 2 < hashes.length) k *= 2;
    return sha256(new Uint8Array([1]), await treeHash(hashes.slice(0, k)), await treeHash(hashes.slice(k)));
  }
  async function logLeaves(logUrl, size, check) {  // the first `size` leaves, or null (failed)
    const leaves = [];
    for (let index = 0; index * 256 < size; index++) {
      const width = Math.min(256, size - index * 256), path = entriesPath(index, width);
      const response = await fetch(`${logUrl.replace(/\/$/, "")}/${path}`);
      if (!response.ok) { check.fail(`the log at ${logUrl}: ${path}: HTTP ${response.status}`); return null; }
      const data = new Uint8Array(await response.arrayBuffer());
      let at = 0;
      for (let i = 0; i < width; i++) {
        const length = at + 2 <= data.length ? (data[at] << 8) | data[at + 1] : -1;
        if (length < 0 || at + 2 + length > data.length) { check.fail(`entry bundle ${index} holds fewer than ${width} leaves`); return null; }
        leaves.push(data.subarray(at + 2, at + 2 + length));
        at += 2 + length;
      }
      if (at !== data.length) { check.fail(`entry bundle ${index} holds more than its ${width} leaves`); return null; }
    }
    return leaves;
  }
  async function checkCompleteness(matter, listedLeaves, note, logUrl, check) {  // offline_verify._check_completeness
    const leaves = await logLeaves(logUrl, note.size, check);
    if (!leaves) return;
    const hashes = [];
    for (const leaf of leaves) hashes.push(await sha256(NUL, leaf));
    if (!equal(await treeHash(hashes), note.root)) { check.fail(`the log's first ${note.size} leaves do not make the checkpoint's root`); return; }
    const parsed = leaves.map((leaf) => { try { return JSON.parse(text(leaf)); } catch { return null; } });
    if (matter.matter_key === undefined) {
      const tagged = parsed.findIndex((l) => l && typeof l === "object" && "matter_tag" in l);
      if (tagged >= 0) check.fail(`the log's leaf ${tagged} carries a matter tag, so a matter bundle under this checkpoint discloses its matter's key (matter format 2 or later); this one says format 1, whose completeness nothing can check`);
      else check.detail = "not checked: no leaf of the log carries a matter tag (matter format 1)";
      return;
    }
    const listed = new Set(matter.trails.map((t) => t?.trail_id));
    const leftOut = reasonsOf(matter);
    const asked = new Map(leftOut.map((e) => [e.trail_id, null]));
    const ours = [];
    let taggedFrom = null;
    for (let i = 0; i < parsed.length; i++) {
      const sealed = parsed[i];
      if (!sealed || typeof sealed !== "object" || typeof sealed.trail !== "string") continue;
      if (asked.has(sealed.trail)) asked.set(sealed.trail, { index: i, sealed });
      if (!("matter_tag" in sealed)) continue;
      if (taggedFrom === null) taggedFrom = i;
      if (typeof sealed.matter_tag === "string" && sealed.matter_tag === await matterTag(matter.matter_key, sealed.trail)) {
        ours.push({ index: i, sealed });
        if (!listed.has(sealed.trail) && !asked.has(sealed.trail)) check.fail(`leaf ${i} seals trail ${sealed.trail} (job ${sealed.job}) of this matter, neither in the bundle nor listed as left out`);
      }
    }
    if (matter.format_version < 3 && ours.some(({ sealed }) => "submitted_at" in sealed)) check.fail(`a leaf of the matter carries submitted_at, so a bundle of it is matter format 3, whose left_out reasons are checked; this one says format ${matter.format_version}`);
    const lines = [...listedLeaves.values()].map((l) => l.submitted_at).filter((t) => typeof t === "string").sort();
    const sel = selectionOfMatter(matter);
    for (const entry of leftOut) {  // matter_leaves.reason_failures
      const at = asked.get(entry.trail_id), name = `trail ${entry.trail_id} is left out as '${entry.reason}'`;
      const foreign = at && typeof at.sealed.matter_tag === "string" && at.sealed.matter_tag !== await matterTag(matter.matter_key, entry.trail_id);
      if (at && String(at.sealed.job) !== entry.job_id) check.fail(`${name} of job ${entry.job_id}, but leaf ${at.index} seals job ${at.sealed.job}`);
      else if (entry.reason === "open" || entry.reason === "sealed_after_checkpoint") { if (at) check.fail(`${name}, but leaf ${at.index}, under the checkpoint, seals it`); }
      else if (!at) check.fail(`${name}, but no leaf under the checkpoint seals it`);
      else if (foreign) check.fail(`${name}, but leaf ${at.index} seals it as no trail of this matter`);
      else if (entry.reason === "no_request") { if (("matter_tag" in at.sealed ? at.sealed.matter_tag : "") !== null) check.fail(`${name}, but leaf ${at.index} does not carry the null matter tag of a trail that recorded no request`); }
      else if (entry.reason === "outside_selection" && typeof at.sealed.matter_tag !== "string") check.fail(`${name}, but leaf ${at.index} carries no tag of this matter`);
      else if (entry.reason === "outside_selection") {
        const holds = await selectionHolds(sel, at.sealed, matter.matter_key, null, lines[0] ?? null);
        if (holds !== false) check.fail(`${name}, but leaf ${at.index} ${holds ? "shows it in the selection" : "does not show it outside it"}`);
      } else check.fail(`${name}, which is no reason a verifier can check`);
    }
    if (taggedFrom === null) check.fail(`none of the log's ${leaves.length} leaves carries a matter tag`);
    if (check.ok) check.detail = `the log's ${leaves.length} leaves (read from ${logUrl}) make the checkpoint's root; from leaf ${taggedFrom} on, where the tags begin, the matter's ${ours.length} leaves are every one in the bundle or left out, and the ${leftOut.length} left out are so for the reason the log's leaves give`;
  }

  async function inclusionOk(index, size, leafHash, path, root) {  // RFC 9162 §2.1.3.2
    if (!(Number.isSafeInteger(index) && index >= 0 && index < size)) return false;
    let fn = index, sn = size - 1, r = leafHash;
    const ONE = new Uint8Array([1]);
    for (const p of path) {
      if (sn === 0) return false;
      if (fn % 2 === 1 || fn === sn) {
        r = await sha256(ONE, p, r);
        while (fn % 2 === 0 && fn !== 0) { fn = Math.floor(fn / 2); sn = Math.floor(sn / 2); }
      } else {
        r = await sha256(ONE, r, p);
      }
      fn = Math.floor(fn / 2); sn = Math.floor(sn / 2);
    }
    return sn === 0 && equal(r, root);
  }

  async function checkTexts(m, chain, check) {
    const doc = json(m, "disclosures.json", check);
    if (!doc || !chain) return;
    const request = chain.payloads.find((p) => p && p.kind === "request");
    const answer = chain.payloads.find((p) => p && p.kind === "answer");
    const digests = { ...(request?.prompt?.digests ?? {}) };
    if (answer) digests["answer.text"] = answer.output_text_digest;
    if (answer && answer.v >= 3) digests["answer.token_ids"] = answer.output_token_ids_digest;
    const slots = Object.keys(doc).filter((n) => SLOT.test(n)).sort();
    const bound = Object.keys(digests).sort(), named = Object.keys(doc).filter((n) => !SLOT.test(n)).sort();
    if (bound.join() !== named.join()) { check.fail(`disclosures.json names ${named}; the records bind ${bound}`); return; }
    for (const name of slots) {  // format 3: each opens a slot a decision commits to
      const e = doc[name];
      if (!chain.committed?.has(name)) check.fail(`disclosures.json opens ${name}, which no decision commits to`);
      else if (!e || typeof e !== "object" || Object.keys(e).sort().join() !== "salt,value") check.fail(`opening of ${name} must be {salt, value}`);
      else if (!HEX64.test(String(e.salt))) check.fail(`opening of ${name} has a salt that is not 64 hex digits`);
    }
    const ids = doc["answer.token_ids"];
    // With a decision's workings sealed (format 4), its tokens are the answer's digests' alone.
    if (!chain.sealedDecisions && ids && typeof ids === "object" && "value" in ids && canonical(chain.emitted ?? []) !== canonical(ids.value)) {
      check.fail("answer.token_ids is disclosed, but the decisions' emitted tokens, opened, are not it (each emitted token must be opened with the answer)");
    }
    for (const [name, member] of Object.entries(TEXT_MEMBERS)) {
      if (!(name in digests) && m.get(member)?.length) check.fail(`${member} holds text that no record binds`);
    }
    for (const name of bound) {
      const entry = doc[name];
      const member = TEXT_MEMBERS[name];
      if (entry.withheld === true) {
        if (member && m.get(member)?.length) check.fail(`${name} is declared withheld, but ${member} is not empty`);
        continue;
      }
      const value = member ? text(m.get(member) ?? new Uint8Array()) : canonical(entry.value);
      const digest = hex(await sha256(utf8("PF-TEXT-v2"), NUL, unhex(entry.salt), NUL, utf8(value)));
      if (digest !== digests[name]) check.fail(`${name} is not the text whose digest the records hold`);
    }
    if (check.ok) check.detail = `${bound.length} bound texts match their digests or are withheld`;
  }

  // --- bundle format 6: the COSE receipt (RFC 9942) and the destruction statement -----------------

  function cborHead(major, n) {  // the shortest head (audit.evidence.receipts._head)
    if (n < 24) return new Uint8Array([(major << 5) | n]);
    if (n < 256) return new Uint8Array([(major << 5) | 24, n]);
    if (n < 65536) return new Uint8Array([(major << 5) | 25, n >> 8, n & 255]);
    const wide = n < 2 ** 32, out = new Uint8Array(wide ? 5 : 9), view = new DataView(out.buffer);
    out[0] = (major << 5) | (wide ? 26 : 27);
    if (wide) view.setUint32(1, n); else view.setBigUint64(1, BigInt(n));
    return out;
  }
  function compareBytes(a, b) {
    for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
    return a.length - b.length;
  }
  function cbor(v) {  // deterministic CBOR (RFC 8949 §4.2.1) of what a receipt holds
    if (v === null) return new Uint8Array([0xf6]);
    if (typeof v === "number") return v >= 0 ? cborHead(0, v) : cborHead(1, -1 - v);
    if (typeof v === "string") { const d = utf8(v); return concat(cborHead(3, d.length), d); }
    if (v instanceof Uint8Array) return concat(cborHead(2, v.length), v);
    if (Array.isArray(v)) return concat(cborHead(4, v.length), ...v.map(cbor));
    if (v instanceof Map) {  // keys in the bytewise order of their encodings
      const pairs = [...v].map(([k, x]) => [cbor(k), cbor(x)]).sort(([a], [b]) => compareBytes(a, b));
      return concat(cborHead(5, pairs.length), ...pairs.flat());
    }
    return concat(cborHead(6, v.tag), cbor(v.value));  // {tag, value}
  }
  // receipt.cose must be exactly the receipt of this leaf (its index, the bundle's path) under the
  // checkpoint (its origin as iss, its size), kid the key in verifier-key.txt, and its signature
  // must verify over the checkpoint's root: the bytes docs/audit-format.md gives.
  async function checkReceipt(m, checkpoint, check) {
    const receipt = m.get("receipt.cose");
    if (!receipt) { check.fail("receipt.cose is missing"); return; }
    if (!receipt.length) { check.skipped = true; check.detail = "none: the checkpoint was signed before receipts (receipt.cose is empty)"; return; }
    if (!checkpoint) { check.fail("no readable checkpoint to hold the receipt to"); return; }
    const key = parseKey(text(m.get("verifier-key.txt") ?? new Uint8Array()).trim(), 1);
    const leaf = JSON.parse(text(m.get("ledger-leaf.json")));
    const path = JSON.parse(text(m.get("inclusion-proof.json"))).proof.map(unhex);
    const header = cbor(new Map([[1, -8], [4, unhex(await keyId(key))], [15, new Map([[1, checkpoint.origin]])], [395, 1]]));
    const signature = receipt.subarray(Math.max(0, receipt.length - 64));
    const expected = cbor({ tag: 18, value: [header, new Map([[396, new Map([[-1, [cbor([checkpoint.size, leaf.index, path])]]])]]), null, signature] });
    if (!equal(expected, receipt)) { check.fail("receipt.cose is not the receipt of this leaf under this checkpoint by the key in verifier-key.txt (the bytes docs/audit-format.md gives)"); return; }
    if (!(await ed25519(key.publicKey, signature, cbor(["Signature1", header, new Uint8Array(0), checkpoint.root])))) {
      check.fail("receipt signature does not verify over the checkpoint's root with the key in verifier-key.txt");
    } else check.detail = `an RFC 9942 receipt of leaf ${leaf.index} under the checkpoint's root, signed by the key in verifier-key.txt`;
  }
  function checkDestruction(m, check) {  // offline_verify._check_destruction
    const doc = json(m, "destruction.json", check);
    if (!doc || typeof doc !== "object" || Array.isArray(doc)) { if (doc !== null) check.fail("destruction.json is not a JSON object"); return; }
    const keys = Object.keys(doc).sort().join(",");
    if (keys === "destroyed" && doc.destroyed === false) { check.detail = "its texts were not destroyed"; return; }
    if (keys !== "destroyed,destroyed_at,destroyed_by,order" || doc.destroyed !== true
      || !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/.test(String(doc.destroyed_at))
      || typeof doc.destroyed_at !== "string" || ![doc.destroyed_by, doc.order].every((v) => typeof v === "string" && v)) {
      check.fail('destruction.json must be {"destroyed": false} or hold exactly destroyed, destroyed_at, destroyed_by, order (destroyed true, a UTC time YYYY-MM-DDTHH:MM:SSZ, non-empty texts)');
      return;
    }
    const disclosures = JSON.parse(text(m.get("disclosures.json") ?? utf8("{}")));
    const opened = Object.entries(disclosures).filter(([, e]) => !(e && typeof e === "object" && Object.keys(e).length === 1 && e.withheld === true)).map(([n]) => n);
    const shown = Object.values(TEXT_MEMBERS).filter((n) => m.get(n)?.length);
    if (opened.length || shown.length) check.fail(`it states the texts were destroyed, yet discloses ${[...opened, ...shown].join(", ")}`);
    else check.detail = `destroyed on ${doc.destroyed_at} under the order ${quoted(doc.order)}; it discloses none of its texts`;
  }

  // --- the checkpoint: C2SP signed note, Ed25519, cosignatures ---------------------------------

  function parseNote(note) {
    const at = note.indexOf("\n\n");
    if (at < 0) throw new Error("no blank line between the body and its signatures");
    const body = note.slice(0, at + 1);
    const [origin, size, root, extra] = body.split("\n");
    if (extra !== "" || !/^(0|[1-9][0-9]*)$/.test(size)) throw new Error("the body is not origin, size, root");
    const lines = note.slice(at + 2).split("\n");
    if (lines.pop() !== "") throw new Error("the note must end with a newline");
    return { body, origin, size: Number(size), root: unbase64(root), lines };
  }
  function parseKey(key, type) {  // <name>+<key id hex>+<base64(type || public key)>
    const first = key.indexOf("+"), second = key.indexOf("+", first + 1);
    const name = key.slice(0, first), id = key.slice(first + 1, second);
    const raw = unbase64(key.slice(second + 1));
    if (first < 1 || second < 0 || raw.length !== 33 || raw[0] !== type) throw new Error(`not a verifier key of type ${type}: ${key}`);
    return { name, id, publicKey: raw.subarray(1), type };
  }
  async function keyId(key) {
    return hex((await sha256(utf8(key.name + "\n"), new Uint8Array([key.type]), key.publicKey)).subarray(0, 4));
  }
  async function ed25519(publicKey, signature, message) {
    const k = await crypto.subtle.importKey("raw", publicKey, { name: "Ed25519" }, false, ["verify"]);
    return crypto.subtle.verify({ name: "Ed25519" }, k, signature, message);
  }
  function signatureBlobs(note, key) {  // the blobs of the lines naming this key
    return note.lines.filter((l) => l.startsWith("\u2014 " + key.name + " "))
      .map((l) => unbase64(l.slice(key.name.length + 3)))
      .filter((blob) => hex(blob.subarray(0, 4)) === key.id);
  }

  async function signedBy(note, keyText) {  // the key, when it signed the note; else null
    const key = parseKey(keyText.trim(), 1);
    if ((await keyId(key)) !== key.id) throw new Error(`${key.name}: the key id does not match the key`);
    for (const blob of signatureBlobs(note, key)) {
      if (blob.length === 68 && (await ed25519(key.publicKey, blob.subarray(4), utf8(note.body)))) return key;
    }
    return null;
  }

  async function checkSignature(note, bundledKey, check) {  // by the key the bundle names
    const key = await signedBy(note, bundledKey);
    if (key) check.detail = `signed by ${key.name}+${key.id} (verifier-key.txt): tree of ${note.size}`;
    else check.fail("the checkpoint is not signed by the key in verifier-key.txt");
  }

  async function checkPinned(note, logKeys, check) {  // ...and by a key the reviewer pinned
    if (!logKeys.length) { check.fail("no log key pinned: pin the log's verifier key, obtained out of band"); return; }
    for (const text of logKeys) {
      const key = await signedBy(note, text);
      if (key) { check.detail = `signed by pinned key ${key.name}+${key.id}`; return; }
    }
    check.fail("no pinned log key signed this checkpoint");
  }

  async function checkCosignatures(note, witnessKeys, check) {
    const names = [];
    for (const text of witnessKeys) {
      const key = parseKey(text.trim(), 4);
      const blobs = signatureBlobs(note, key);
      if (!blobs.length) { check.fail(`witness ${key.name} did not cosign this checkpoint`); continue; }
      for (const blob of blobs) {
        const time = new DataView(blob.buffer, blob.byteOffset + 4, 8).getBigUint64(0);
        const message = utf8(`cosignature/v1\ntime ${time}\n${note.body}`);
        if (blob.length !== 76 || !(await ed25519(key.publicKey, blob.subarray(12), message))) {
          check.fail(`witness ${key.name}'s cosignature does not verify`);
        } else names.push(`${key.name} at ${time}`);
      }
    }
    if (check.ok) check.detail = `${names.length} pinned witness(es) cosigned: ${names.join(", ")}`;
  }

  // --- a bundle, whole -------------------------------------------------------------------------

  function disclosedTokenIds(m) {  // the prompt's token ids, when disclosures.json discloses them
    try {
      const value = JSON.parse(text(m.get("disclosures.json")))?.["prompt.token_ids"]?.value;
      return Array.isArray(value) && value.every((t) => Number.isSafeInteger(t) && t >= 0) ? value : null;
    } catch { return null; }
  }

  // --- audit formats 3 and 4: a decision's tokens, or all its workings, as salted commitments
  // (audit.evidence.sealing) ---------------------------------------------------------------

  const SLOT = /^step\.(0|[1-9][0-9]*)\.(drafted\.(0|[1-9][0-9]*)|correction|top\.(0|[1-9][0-9]*)|workings)$/;
  // What a format-4 decision shows in clear; its workings commitment seals every other key.
  const CLEAR_KEYS = ["v", "kind", "request_id", "step", "rule", "draft", "target", "params", "stop"];
  const WORKINGS_KEYS = ["accepted_count", "context_length", "correction", "draft_length", "draft_source", "drafted", "emitted", "rationale", "timings_us"];
  const WORKINGS_OPTIONAL = ["emitted_text", "logprobs", "target_top"];
  const sealsWorkings = (d) => Number.isSafeInteger(d.v) && d.v >= 4;
  const isToken = (v) => Number.isSafeInteger(v) && v >= 0;
  function disclosedOpenings(m) {  // slot name -> {salt, value}, as disclosures.json opens them
    try {
      const doc = JSON.parse(text(m.get("disclosures.json")));
      return Object.fromEntries(Object.entries(doc).filter(([n, e]) => SLOT.test(n) && e && typeof e === "object"));
    } catch { return {}; }
  }
  function slotCommitments(d) {
    if (sealsWorkings(d)) return { [`step.${d.step}.workings`]: d.workings };
    const found = {};
    (d.drafted ?? []).forEach((e, i) => { found[`step.${d.step}.drafted.${i}`] = e?.commitment; });
    found[`step.${d.step}.correction`] = d.correction?.commitment;
    (d.target_top ?? []).forEach((c, j) => { found[`step.${d.step}.top.${j}`] = c; });
    return found;
  }
  function shapeProblem(d) {  // sealing.shape_problem
    if (sealsWorkings(d)) {
      if (!isToken(d.step)) return "step is not a non-negative integer";
      const shown = Object.keys(d).filter((k) => !CLEAR_KEYS.includes(k) && k !== "workings").sort();
      if (shown.length) return `it carries its workings in clear (${shown.join(", ")})`;
      return "workings" in d ? null : "it has no workings commitment";
    }
    for (const name of ["step", "accepted_count", "emitted_count"]) if (!isToken(d[name])) return `${name} is not a non-negative integer`;
    if (!Array.isArray(d.drafted) || !d.drafted.every((e) => e && typeof e === "object" && !Array.isArray(e))) return "drafted is not a list of objects";
    if (!d.correction || typeof d.correction !== "object" || Array.isArray(d.correction)) return "correction is not an object";
    if ("emitted" in d || "emitted_text" in d) return "it carries emitted tokens in clear";
    if ([...d.drafted, d.correction].some((e) => "token" in e || "text" in e)) return "it carries a token in clear";
    if ("target_top" in d && !Array.isArray(d.target_top)) return "target_top is not a list of commitments";
    const kept = Math.min(d.accepted_count, d.drafted.length) + 1;
    if (d.emitted_count > kept) return `emitted_count is more than the ${kept} tokens the step keeps`;
    if ("target_top" in d && d.target_top.length !== d.emitted_count) return "target_top does not hold one commitment per emitted token";
    return null;
  }
  function valueProblem(name, v) {
    if (name.endsWith(".workings")) {
      const keys = v && typeof v === "object" && !Array.isArray(v) ? Object.keys(v) : [];
      const ok = WORKINGS_KEYS.every((k) => keys.includes(k)) && keys.every((k) => WORKINGS_KEYS.includes(k) || WORKINGS_OPTIONAL.includes(k));
      return ok ? null : `a workings slot opens to an object of ${WORKINGS_KEYS.join(", ")}`;
    }
    if (name.includes(".top.")) {
      const ok = Array.isArray(v) && v.every((x) => x && typeof x === "object" && Object.keys(x).sort().join() === "logprob,token" && isToken(x.token) && typeof x.logprob === "string");
      return ok ? null : "a top slot opens to a list of {token, logprob}";
    }
    const keys = v && typeof v === "object" && !Array.isArray(v) ? Object.keys(v).sort().join() : "";
    const ok = (keys === "token" || keys === "text,token") && isToken(v.token) && (!("text" in v) || typeof v.text === "string");
    return ok ? null : "a token slot opens to {token} or {token, text}";
  }
  // A format-3 decision, its opened slots checked against their commitments and put in place
  // (a sealed token null), as sealing.open_decision; a format-4 one opened whole or left as it
  // is; null when it cannot be opened at all.
  async function openDecision(d, openings, committed, fail) {
    const problem = shapeProblem(d);
    if (problem) { fail(`decision record is not in format ${sealsWorkings(d) ? 4 : 3}'s shape (${problem})`); return null; }
    const commitments = slotCommitments(d), values = {};
    for (const [name, c] of Object.entries(commitments)) {
      committed.add(name);
      if (!(typeof c === "string" && HEX64.test(c))) fail(`${name}: the record's commitment is not a SHA-256 hex digest`);
      const opening = openings[name];
      if (!opening) continue;
      const problem = valueProblem(name, opening.value);
      if (problem) { fail(`${name}: ${problem}`); continue; }
      let digest;
      try { digest = hex(await sha256(utf8("PF-TOKEN-v3"), NUL, unhex(opening.salt), NUL, utf8(canonical(opening.value)))); }
      catch { fail(`${name}: the opening's salt is not hex or its value not canonical`); continue; }
      if (digest !== c) fail(`${name}: the opened value is not the one the record commits to`);
      else values[name] = opening.value;
    }
    if (sealsWorkings(d)) {
      const workings = values[`step.${d.step}.workings`];
      if (!workings) return { ...d };
      const { workings: _, ...clear } = d;
      return { ...clear, ...workings };
    }
    const tokenOf = (slot, entry) => {
      const { commitment, ...kept } = entry, v = values[`step.${d.step}.${slot}`];
      kept.token = v ? v.token : null;
      if (v && "text" in v) kept.text = v.text;
      return kept;
    };
    const { emitted_count: count, target_top: tops, ...clear } = d;
    clear.drafted = d.drafted.map((e, i) => tokenOf(`drafted.${i}`, e));
    clear.correction = tokenOf("correction", d.correction);
    clear.emitted = [...clear.drafted.slice(0, d.accepted_count), clear.correction].slice(0, count).map((e) => e.token);
    return clear;
  }

  async function checkDecisions(m, chain, check) {  // decision-rule.js, on every format-2 or 3 decision
    if (!chain) { check.fail("no readable records to re-check (see the records check)"); return; }
    const request = chain.payloads.find((p) => p && p.kind === "request") ?? null;
    const decisions = [], openings = disclosedOpenings(m);
    chain.committed = new Set();
    for (const p of chain.payloads.filter((p) => p && p.kind === "decision")) {
      if (!(p.v >= 3)) { decisions.push(p); continue; }
      const opened = await openDecision(p, openings, chain.committed, (reason) => check.fail(`step ${p.step}: ${reason}`));
      if (opened) decisions.push(opened);
    }
    chain.emitted = decisions.flatMap((d) => Array.isArray(d.emitted) ? d.emitted : []);
    chain.sealedDecisions = decisions.filter((d) => sealsWorkings(d) && "workings" in d).length;
    const { failures, unchecked } = await globalThis.PathfinderDecisionRule.review(request, decisions, disclosedTokenIds(m));
    for (const { step, reason } of failures) check.fail(`step ${step}: ${reason}`);
    const total = decisions.length, sealed = chain.sealedDecisions;
    const rechecked = total && sealed === total ? `none of the ${total} decisions re-checked (each one's workings are sealed)`
      : `${sealed ? `${total - sealed} of ${total}` : total} decisions re-checked: draws, ratios, accept tests, corrections, emitted tokens, stops, the token budget and copied drafts follow from the records`;
    if (check.ok) check.detail = rechecked + unchecked.map((why) => `; not re-checked: ${why}`).join("");
  }

  // models.json and params.json are exactly what the first record names (audit.evidence.bundle_format
  // .described): the request record's models and params, or a format-1 first decision's.
  const pyFalsy = (v) => v === null || v === undefined || v === false || v === 0 || v === "" ||
    (typeof v === "object" && Object.keys(v).length === 0);
  function checkDescribed(m, chain, check) {
    const first = chain?.payloads[0];
    const record = first && typeof first === "object" && !Array.isArray(first) ? first : {};
    const models = pyFalsy(record.models) ? { draft: record.draft ?? null, target: record.target ?? null } : record.models;
    const params = "params" in record ? record.params : {};
    for (const [name, value] of [["models.json", models], ["params.json", params]]) {
      const bytes = m.get(name);
      if (!bytes) check.fail(`${name} is missing`);
      else if (!equal(utf8(memberForm(value)), bytes)) check.fail(`${name} is not what the records name (in the bundle's JSON form)`);
    }
    if (check.ok) check.detail = "models.json and params.json are what the first record names, byte for byte";
  }

  // --- the timestamp's shape (audit/evidence/der.py): one DER TimeStampResp, granted, CMS SignedData ---

  function tlv(data, at) {  // [tag, value, end]; definite, minimal lengths only
    if (at + 2 > data.length) throw new Error("truncated");
    const tag = data[at], first = data[at + 1];
    at += 2;
    let length = first;
    if (first >= 0x80) {
      const count = first & 0x7f;
      if (count === 0 || count > 4 || at + count > data.length) throw new Error("an indefinite or oversized length");
      length = 0;
      for (let i = 0; i < count; i++) length = length * 256 + data[at + i];
      if (length < 0x80 || data[at] === 0) throw new Error("a length not in its shortest form");
      at += count;
    }
    if (at + length > data.length) throw new Error("a length past the end");
    return [tag, data.subarray(at, at + length), at + length];
  }
  const SIGNED_DATA = unhex("2a864886f70d010702");
  function timestampFailure(data) {
    try {
      const [tag, body, end] = tlv(data, 0);
      if (tag !== 0x30 || end !== data.length) return "not one DER SEQUENCE";
      const [statusTag, status, after] = tlv(body, 0);
      if (statusTag !== 0x30) return "no PKIStatusInfo";
      const [intTag, value] = tlv(status, 0);
      if (intTag !== 0x02 || !(value.length === 1 && value[0] <= 1)) return "its status is not granted";
      const [tokenTag, token] = tlv(body, after);
      if (tokenTag !== 0x30) return "no timeStampToken";
      const [oidTag, oid] = tlv(token, 0);
      if (oidTag !== 0x06 || !equal(oid, SIGNED_DATA)) return "its token is not CMS SignedData";
    } catch (e) { return `not DER (${e.message})`; }
    return null;
  }
  // der.timestamp_imprint: the SHA-256 the TSTInfo stamps (its messageImprint); throws on a
  // response that is no such timestamp.
  const TST_INFO = unhex("2a864886f70d0109100104"), SHA256_OID = unhex("608648016503040201");
  function timestampImprint(data) {
    const failure = timestampFailure(data);
    if (failure) throw new Error(failure);
    const expect = (ok, why) => { if (!ok) throw new Error(why); };
    const [, body] = tlv(data, 0);
    const [, , afterStatus] = tlv(body, 0);
    const [, token] = tlv(body, afterStatus);
    const [, , afterType] = tlv(token, 0);
    const [t0, explicit] = tlv(token, afterType);
    expect(t0 === 0xa0, "the token holds no SignedData");
    const [t1, signed] = tlv(explicit, 0);
    expect(t1 === 0x30, "SignedData is not a SEQUENCE");
    const [, , afterVersion] = tlv(signed, 0);
    const [t2, , afterAlgorithms] = tlv(signed, afterVersion);
    expect(t2 === 0x31, "SignedData has no digestAlgorithms");
    const [t3, content] = tlv(signed, afterAlgorithms);
    expect(t3 === 0x30, "SignedData has no encapContentInfo");
    const [t4, oid, afterOid] = tlv(content, 0);
    expect(t4 === 0x06 && equal(oid, TST_INFO), "the token's content is not a TSTInfo");
    const [t5, wrapped] = tlv(content, afterOid);
    expect(t5 === 0xa0, "the TSTInfo is missing");
    const [t6, octets] = tlv(wrapped, 0);
    expect(t6 === 0x04, "the TSTInfo is not an OCTET STRING");
    const [t7, info] = tlv(octets, 0);
    expect(t7 === 0x30, "the TSTInfo is not a SEQUENCE");
    const [, , afterInfoVersion] = tlv(info, 0);
    const [, , afterPolicy] = tlv(info, afterInfoVersion);
    const [t8, imprint] = tlv(info, afterPolicy);
    expect(t8 === 0x30, "the TSTInfo has no messageImprint");
    const [t9, algorithm, afterAlgorithm] = tlv(imprint, 0);
    const [algTag, algOid] = t9 === 0x30 ? tlv(algorithm, 0) : [0, new Uint8Array()];
    expect(algTag === 0x06 && equal(algOid, SHA256_OID), "the messageImprint is not SHA-256");
    const [t10, digest] = tlv(imprint, afterAlgorithm);
    expect(t10 === 0x04 && digest.length === 32, "the messageImprint's digest is not 32 bytes");
    return digest;
  }

  // A crafted member (a null row, a salt that is not hex, text that is not UTF-8) must fail
  // the check it feeds, never stop the verifier: every step runs under this guard.
  async function guarded(check, step) {
    try { return await step(); } catch (e) { check.fail(`unreadable (${e.message})`); return null; }
  }

  async function checkTrail(m, checkpoint, label, checks) {
    const add = (name) => { const c = new Check(label + name); checks.push(c); return c; };
    const chainCheck = add("records and chain");
    const chain = await guarded(chainCheck, () => checkChain(m, chainCheck));
    // In offline_verify's order and under its names, so both count the same checks.
    const leafCheck = add("ledger leaf"), ruleCheck = add("decision rule");
    const hashCheck = add("leaf hash"), proofCheck = add("inclusion proof");
    const sealed = await guarded(leafCheck, () => checkLeafAndProof(m, chain, checkpoint, leafCheck, hashCheck, proofCheck));
    await guarded(ruleCheck, () => checkDecisions(m, chain, ruleCheck));
    const textCheck = add("question and answer");
    await guarded(textCheck, () => checkTexts(m, chain, textCheck));
    const describedCheck = add("models and params");
    await guarded(describedCheck, () => checkDescribed(m, chain, describedCheck));
    if (m.has("receipt.cose") || m.has("destruction.json")) {  // bundle format 6
      const receiptCheck = add("receipt");
      await guarded(receiptCheck, () => checkReceipt(m, checkpoint, receiptCheck));
      const destructionCheck = add("destruction");
      await guarded(destructionCheck, () => checkDestruction(m, destructionCheck));
    }
    return { chain, sealed };
  }

  async function verify(bytes, pins = {}) {  // never rejects: whatever goes wrong is a failed check
    try { return await verifyBundle(bytes, pins); } catch (e) {
      return { kind: "unreadable", ok: false, checks: [
        { name: "bundle", ok: false, failures: [`unreadable (${e.message})`], detail: "" }] };
    }
  }

  async function checkListing(entry, matter, chain, sealed, listing) {  // a matter.json entry is its trail
    const request = chain?.payloads.find((p) => p && p.kind === "request");
    if (matter.matter_key !== undefined && typeof sealed?.matter_tag === "string"
      && sealed.matter_tag !== await matterTag(matter.matter_key, entry.trail_id)) listing.fail("its ledger leaf's matter_tag is not the one matter_key makes for it");
    if (chain?.trailId !== entry.trail_id) listing.fail("its chain is of another trail than matter.json lists");
    if (sealed?.index !== entry.leaf_index || sealed?.job !== entry.job_id || sealed?.outcome !== entry.outcome) listing.fail("its ledger leaf is not the entry, job or outcome listed");
    if (entry.abandoned !== (entry.outcome === "abandoned")) listing.fail("abandoned must be true exactly when the outcome is");
    if (!request) listing.fail("it has no request record, so nothing binds it to the matter");
    else if (request.matter !== matter.matter || request.attempt !== entry.attempt) listing.fail(`its request record is of matter '${request.matter}', attempt ${request.attempt}`);
    if (HEX64.test(String(matter.matter_key)) && typeof sealed?.matter_tag === "string" && typeof sealed?.batch_tag === "string"
      && request?.batch_line && typeof request.batch_line === "object"
      && sealed.batch_tag !== await batchTag(matter.matter_key, entry.trail_id, String(request.batch_line.batch))) listing.fail("its ledger leaf's batch_tag is not of the batch its request record names");
    if (!sealed || typeof sealed !== "object") return;
    // offline_verify._check_format_floor: no format older than the leaves it holds
    if ("submitted_at" in sealed && matter.format_version < 3) listing.fail(`its ledger leaf carries submitted_at, so a bundle of it is matter format 3, whose selection and left_out reasons are checked; this one says format ${matter.format_version}`);
    else if ("matter_tag" in sealed && matter.format_version < 2) listing.fail("its ledger leaf carries a matter tag, so a bundle of it discloses the matter's key (matter format 2 or later); this one says format 1");
    if (matter.format_version >= 2 && HEX64.test(String(matter.matter_key)) && request) {
      const sel = { since: matter.since ?? null, until: matter.until ?? null, batch: matter.batch ?? null };
      const holds = await selectionHolds(sel, sealed, matter.matter_key, request.submitted_at ?? null);
      if (holds !== true) listing.fail(holds === null ? `nothing signed shows it is of the selection, ${selectionOf(matter)}` : `it is not of the selection, ${selectionOf(matter)}`);
    }
    if (listing.ok) listing.detail = `job ${entry.job_id}, attempt ${entry.attempt}, ${entry.outcome}, of matter '${matter.matter}'`;  // offline_verify's words
  }

  // Attempt n > 1 names attempt n - 1 of its job (previous_trail), which must be in the bundle
  // or listed as left out: a dropped earlier attempt shows (audit.evidence.offline_verify._check_attempts).
  function checkAttempts(listed, requests, leftOut, check) {
    const byId = new Map(listed.map((e) => [e.trail_id, e]));
    const left = new Map((Array.isArray(leftOut) ? leftOut : []).filter((e) => e && typeof e === "object").map((e) => [e.trail_id, e]));
    listed.forEach((entry, i) => {
      const request = requests[i];
      if (!request) return;  // its listing check failed for that
      const { attempt, previous_trail: previous } = request;
      const name = `trail ${entry.trail_id} (attempt ${attempt})`;
      if (previous != null && typeof previous !== "string") check.fail(`${name}: previous_trail is not a trail id`);
      else if ((attempt === 1) !== (previous === null || previous === undefined)) check.fail(`${name}: the first attempt, and only it, names no previous trail`);
      else if (byId.has(previous)) {
        const earlier = byId.get(previous);
        if (earlier.job_id !== entry.job_id || earlier.attempt !== attempt - 1) check.fail(`${name}: its previous trail is not attempt ${attempt - 1} of its job`);
      } else if (previous != null && left.get(previous)?.job_id !== entry.job_id) {
        check.fail(`${name}: its previous trail ${previous} is neither in the bundle nor left out`);
      }
    });
    if (check.ok) check.detail = "every attempt after the first names its earlier one, in the bundle or left out";
  }

  async function verifyBundle(bytes, pins) {
    const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    const checks = [];
    const add = (name) => { const c = new Check(name); checks.push(c); return c; };
    const result = (kind) => ({ kind, ok: checks.every((c) => c.ok), checks: checks.map(
      (c) => ({ name: c.name, ok: c.ok, failures: c.failures, detail: c.detail, skipped: c.skipped })) });
    const container = add("zip container");
    let members;
    try { members = readZip(data); } catch (e) { container.fail(e.message); return result("unreadable"); }
    if (!equal(deterministicZip(members), data)) container.fail("the zip is not byte-for-byte the deterministic packing of its members");
    else container.detail = `byte-for-byte the deterministic packing of its ${members.length} members`;
    const m = new Map(members), names = members.map(([n]) => n);
    const isMatter = m.has("matter.json");

    const matterCheck = isMatter ? add("matter.json") : null;
    const matter = isMatter ? json(m, "matter.json", matterCheck) : null;
    const listed = Array.isArray(matter?.trails) ? matter.trails : [];
    const ids = listed.map((t) => t.trail_id);
    const expected = isMatter ? [matterNames(ids), matterNames(ids, TRAIL_MEMBERS_V5)]
      : [TRAIL_BUNDLE, TRAIL_BUNDLE_V5, TRAIL_BUNDLE_V2];
    const membersCheck = add("members");
    if (!expected.some((e) => e.join("\n") === names.join("\n"))) membersCheck.fail("not exactly the format's members, in order");

    const manifestCheck = add("manifest");
    let format = null;
    try {
      const s = text(m.get("manifest.json"));
      if (!isCanonical(s)) manifestCheck.fail("manifest is not canonical JSON");
      const manifest = JSON.parse(s), files = manifest.files;
      const allowed = names.some((n) => n === "receipt.cose" || n.endsWith("/receipt.cose")) ? [6]
        : names.includes("report.pdf") ? [3, 4, 5] : [2];
      if (!allowed.includes(manifest.format_version)) manifestCheck.fail(`bundle format_version ${manifest.format_version}; these members are format ${allowed.join(" or ")}'s`);
      else format = manifest.format_version;
      const others = names.filter((n) => n !== "manifest.json");
      if (Object.keys(files).sort().join("\n") !== [...others].sort().join("\n")) manifestCheck.fail("the manifest does not list exactly the other members");
      for (const n of others) {
        if (files[n] !== hex(await sha256(m.get(n)))) manifestCheck.fail(`${n} does not match its SHA-256 in the manifest`);
      }
    } catch (e) { manifestCheck.fail(`manifest unreadable (${e.message})`); }

    // The trails' proofs need the checkpoint, whose signature is checked (and listed) after
    // them, in offline_verify's order.
    let note = null, noteProblem = null;
    try { note = parseNote(text(m.get("checkpoint.txt"))); } catch (e) { noteProblem = `checkpoint.txt: ${e.message}`; }
    const listedLeaves = new Map();  // each listed trail's ledger leaf, for completeness
    if (isMatter) {
      if (!listed.length) matterCheck.fail("trails must be a non-empty list: a matter bundle proves at least one trail");
      const matterKeys = Object.keys(matter ?? {}).sort().join(",");
      const matterKeysOf = { 1: "format_version,left_out,matter,since,trails,tree_size,until",
        2: "format_version,left_out,matter,matter_key,since,trails,tree_size,until",
        3: "batch,format_version,left_out,matter,matter_key,since,trails,tree_size,until" };
      if (matterKeys !== matterKeysOf[matter?.format_version] || (matter.format_version > 1 && !HEX64.test(String(matter.matter_key))))
        matterCheck.fail("matter.json is not of matter format 1, 2 or 3 (2 and 3 disclose a 64-hex-digit matter_key, 3 a batch)");
      if (matter && ![matter.since, matter.until].every((d) => d === null || (typeof d === "string" && /^\d{4}-\d{2}-\d{2}$/.test(d)))) matterCheck.fail("since and until must each be a UTC day (YYYY-MM-DD) or null");
      if (matter && matter.format_version >= 3 && !(matter.batch === null || typeof matter.batch === "string")) matterCheck.fail("batch must be a batch id or null");
      if (matter?.format_version >= 3) {
        for (const e of leftOutOf(matter)) if (!LEFT_OUT_CODES.includes(e.reason)) matterCheck.fail(`trail ${e.trail_id} is left out for '${e.reason}', no reason a verifier can check (one of ${LEFT_OUT_CODES.join(", ")})`);
      }
      const requests = [];
      for (const entry of listed) {
        const own = new Map(TRAIL_MEMBERS.map((n) => [n, m.get(`trails/${entry.trail_id}/${n}`)]).filter(([, v]) => v));
        own.set("verifier-key.txt", m.get("verifier-key.txt") ?? new Uint8Array());
        const label = `trail ${entry.trail_id}: `;
        const { chain, sealed } = await checkTrail(own, note, label, checks);
        const listing = add(label + "listing");
        await guarded(listing, () => checkListing(entry, matter, chain, sealed, listing));
        if (sealed && typeof sealed === "object") listedLeaves.set(entry.trail_id, sealed);
        requests.push(chain?.payloads.find((p) => p && p.kind === "request") ?? null);
      }
      if (listed.length) {
        const attempts = add("attempts");
        await guarded(attempts, () => checkAttempts(listed, requests, matter.left_out, attempts));
      }
      if (matter && note && matter.tree_size !== note.size) matterCheck.fail("tree_size is not the checkpoint's size");
      const held = new Set(listed.map((t) => t.trail_id));
      for (const entry of Array.isArray(matter?.left_out) ? matter.left_out : []) {
        if (held.has(entry?.trail_id)) matterCheck.fail(`trail ${entry.trail_id} is in the bundle and also listed as left out`);
      }
    } else {
      await checkTrail(m, note, "", checks);
    }
    const evidence = [...checks];  // before the signature and pins, which judge trust, not content
    const noteCheck = add("checkpoint signature");
    if (noteProblem) noteCheck.fail(noteProblem);
    if (note) {
      try {
        await checkSignature(note, text(m.get("verifier-key.txt") ?? new Uint8Array()), noteCheck);
      } catch (e) { noteCheck.fail(`verifier-key.txt: ${e.message}`); }
      const pinnedCheck = add("pinned key");
      try { await checkPinned(note, pins.logKeys ?? [], pinnedCheck); } catch (e) { pinnedCheck.fail(e.message); }
      if ((pins.witnessKeys ?? []).length) {
        const cosign = add("witness cosignatures");
        try { await checkCosignatures(note, pins.witnessKeys, cosign); } catch (e) { cosign.fail(e.message); }
      }
    }
    if (m.get("checkpoint.tsr")?.length) {  // no authority is pinned here: the shape and imprint
      const stamp = add("timestamp");
      let imprint = null;
      try { imprint = timestampImprint(m.get("checkpoint.tsr")); } catch (e) { stamp.fail(`checkpoint.tsr is not an RFC 3161 timestamp response: ${e.message}`); }
      if (imprint && !equal(imprint, await sha256(m.get("checkpoint.txt") ?? new Uint8Array()))) stamp.fail("checkpoint.tsr timestamps another document: its imprint is not checkpoint.txt's");
      else if (imprint) stamp.detail = "UNVERIFIED: checkpoint.tsr is a granted RFC 3161 response over checkpoint.txt (its imprint matches), but who signed it, and the time it states, are checked only with the authority's certificate (offline_verify --tsa-cert)";
    }
    // A matter of format 2 is checked complete against this service's log when the bundle's
    // checkpoint is of it (the page reads the log's tiles as an examiner would); a bundle of
    // another log is left to offline_verify --log.
    let completenessLeft = false;
    if (isMatter && matter) {
      if (note && noteCheck.ok && pins.log && note.origin === pins.log.origin) {
        const complete = add("completeness");
        await guarded(complete, () => checkCompleteness(matter, listedLeaves, note, pins.log.url, complete));
      } else completenessLeft = true;
    }
    const descriptiveCheck = add("descriptive files");
    checkDescriptive(m, isMatter, format, evidence, pins.texts ?? globalThis.PathfinderBundleTexts, descriptiveCheck);
    // What only offline_verify checks: it makes report.pdf again, and with --log it checks a
    // matter of another log complete against that log's tiles.
    const unproven = descriptiveCheck.ok ? ["report.pdf"] : [];
    if (completenessLeft) unproven.push("completeness against the log (--log)");
    return { ...result(isMatter ? "matter" : "trail"), unproven };
  }

  // --- the page ---------------------------------------------------------------------------------

  function pinned(id) {
    return (document.getElementById(id)?.value ?? "").split("\n").map((s) => s.trim()).filter(Boolean);
  }
  function tally(checks) {  // offline_verify's words: what ran and passed, and what did not run
    const skipped = checks.filter((c) => c.skipped).length;
    const passed = `${checks.length - skipped} checks passed`;
    return skipped ? `${passed}, ${skipped} not run (SKIP below)` : passed;
  }
  function show(outcome, where) {
    where.replaceChildren();
    const verdict = document.createElement("p");
    verdict.id = "verdict";
    verdict.className = outcome.ok ? "badge ok" : "badge broken";
    const failed = outcome.checks.filter((c) => !c.ok);
    const except = (outcome.unproven ?? []).length ? ` (except ${outcome.unproven.join(" and ")}: left to python -m audit.offline_verify)` : "";
    verdict.textContent = outcome.ok ? `Verified in this browser${except}: ${tally(outcome.checks)}`
      : `NOT verified: ${failed.map((c) => c.name).join("; ")} failed`;
    where.append(verdict);
    const list = document.createElement("ul");
    list.className = "checks";
    for (const c of outcome.checks) {
      const li = document.createElement("li");
      li.dataset.check = c.name;
      li.dataset.ok = String(c.ok);
      li.textContent = `${c.ok ? (c.skipped ? "SKIP" : "OK") : "FAIL"}  ${c.name}${c.ok ? (c.detail ? ": " + c.detail : "") : ": " + c.failures.join("; ")}`;
      list.append(li);
    }
    where.append(list);
  }
  function wire() {
    const form = document.getElementById("verify-form");
    if (!form) return;
    for (const id of ["log-keys", "witness-keys"]) {  // pinned keys stay with this browser
      const field = document.getElementById(id);
      field.value = localStorage.getItem("pathfinder." + id) ?? field.value;
      field.addEventListener("change", () => localStorage.setItem("pathfinder." + id, field.value));
    }
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const where = document.getElementById("verify-result");
      const file = document.getElementById("bundle-file").files[0];
      if (!file) { where.textContent = "Choose a bundle first."; return; }
      if (file.size > MAX_BUNDLE_BYTES) {
        show(refused(`the bundle is ${file.size} bytes, over the ${MAX_BUNDLE_BYTES}-byte limit (offline_verify's)`), where);
        return;
      }
      where.textContent = "Checking…";
      const pins = { logKeys: pinned("log-keys"), witnessKeys: pinned("witness-keys"), texts: globalThis.PathfinderBundleTexts,
        log: { url: new URL(form.dataset.log, location.href).href, origin: form.dataset.logOrigin } };
      show(await inWorker(form, new Uint8Array(await file.arrayBuffer()), pins), where);
    });
  }

  // The page's limits: offline_verify's size limit, and a time past which a bundle is judged
  // built to stall the verifier (a real matter of thousands of trails takes seconds).
  const MAX_BUNDLE_BYTES = 256 * 1024 * 1024;
  const TIME_LIMIT_S = 120;
  const refused = (reason) => ({ kind: "unreadable", ok: false, checks: [{ name: "bundle", ok: false, failures: [reason], detail: "" }] });
  function inWorker(form, bytes, pins) {  // verify() in a Web Worker, stopped at the time limit
    return new Promise((resolve) => {
      const worker = new Worker(form.dataset.worker);
      const done = (outcome) => { clearTimeout(timer); worker.terminate(); resolve(outcome); };
      const timer = setTimeout(() => done(refused(`not finished after ${TIME_LIMIT_S} s: stopped`)), TIME_LIMIT_S * 1000);
      worker.onmessage = (event) => done(event.data);
      worker.onerror = (event) => { event.preventDefault(); done(refused(`the verifier failed (${event.message})`)); };
      worker.postMessage({ scripts: [form.dataset.decisionRule, form.dataset.verifier] });
      worker.postMessage({ bytes, pins }, [bytes.buffer]);
    });
  }

  globalThis.PathfinderVerify = { verify, canonical };
  if (typeof document === "undefined") return;  // inside verify-worker.js
  const carried = document.getElementById("bundle-texts");  // README templates, for the worker too
  if (carried) globalThis.PathfinderBundleTexts = JSON.parse(carried.textContent);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", wire);
  else wire();
})();
