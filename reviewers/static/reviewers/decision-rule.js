/* The decision rule, re-checked from the records alone, in the reviewer's browser.

   The page verifier's second half of audit/evidence/decision_rule.py (docs/audit-format.md, "The decision
   rule, re-checkable from the record"), written again from the doc: for every format-2, 3 or 4
   decision (a format-3 or 4 decision opened first: verify.js, a sealed token null; a format-4
   decision whose workings stay sealed is checked only for what it shows in clear),
   each accept draw u from the RNG formula, each ratio as p / q, the accept test, where testing
   stopped, the correction's kind and draw, the emitted tokens, the stop and the token budget,
   the draft's provenance, and that the decision ran under its request's models and params.

   PathfinderDecisionRule.failures(request, decisions, promptIds) resolves to a list of
   {step, reason}; an empty list means every decision obeys the rule. review() resolves to
   {failures, unchecked}: unchecked names what the records could not re-check, and why. */
(function () {
  "use strict";

  const GREEDY = "greedy-argmax", SAMPLING = "speculative-sampling", COUPLED = "coupled-sampling";
  const COUPLED_SINCE = 5;  // the first trail format whose sampled decisions use coupled draws
  const PARAMS = ["draft_length", "eos_token_id", "max_tokens", "seed", "temperature", "top_k", "top_p"];
  const PROMPT_LOOKUP = "pathfinder";
  const enc = new TextEncoder();

  async function uniform(seed, step, position, stream) {  // (first 8 bytes >> 11) / 2^53
    const message = enc.encode(`PF-RNG-v1\0${seed}\0${step}\0${position}\0${stream}`);
    const digest = new DataView(await crypto.subtle.digest("SHA-256", message));
    return Number(digest.getBigUint64(0, false) >> 11n) / 2 ** 53;
  }

  async function outputUniform(seed, index) {  // coupled sampling's draw for output position index
    const message = enc.encode(`PF-RNG-v2\0${seed}\0${index}\0sample`);
    const digest = new DataView(await crypto.subtle.digest("SHA-256", message));
    return Number(digest.getBigUint64(0, false) >> 11n) / 2 ** 53;
  }

  // How a record writes a binary64: Python's repr ("1.0", "1e-05", "0.1", "1e+16").
  function numberText(x) {
    if (!Number.isFinite(x)) throw new Error("not a finite number");
    if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
    const [mantissa, e] = x.toExponential().split("e");  // the shortest digits that read back
    const exp = Number(e), sign = x < 0 ? "-" : "";
    const digits = mantissa.replace("-", "").replace(".", "");
    if (exp < -4 || exp >= 16) {
      const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
      return `${sign}${m}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
    }
    if (exp < 0) return `${sign}0.${"0".repeat(-exp - 1)}${digits}`;
    return `${sign}${digits.slice(0, exp + 1).padEnd(exp + 1, "0")}.${digits.slice(exp + 1) || "0"}`;
  }

  class Bad extends Error {}
  function number(value, name, high = Infinity) {
    if (typeof value !== "string") throw new Bad(`${name} is not a decimal string`);
    const x = Number(value);
    if (!Number.isFinite(x) || value.trim() !== value || numberText(x) !== value) {
      throw new Bad(`${name} ${JSON.stringify(value)} is not written as the format writes numbers`);
    }
    if (!(x >= 0 && x <= high)) throw new Bad(`${name} ${value} is outside [0, ${high}]`);
    return x;
  }
  function token(value, name) {  // null: sealed in a format-3 record and not opened
    if (value === null) return null;
    if (!Number.isSafeInteger(value) || value < 0) throw new Bad(`${name} is not a token id`);
    return value;
  }
  const isInt = (v) => Number.isSafeInteger(v);
  const same = (a, b) => JSON.stringify(sorted(a)) === JSON.stringify(sorted(b));
  function sorted(v) {
    if (Array.isArray(v)) return v.map(sorted);
    if (v && typeof v === "object") return Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])]));
    return v;
  }
  const copies = (d) => d.draft && typeof d.draft === "object" && d.draft.runtime === PROMPT_LOOKUP;
  function untilEos(tokens, eos) {
    const at = eos === null ? -1 : tokens.indexOf(eos);
    return at < 0 ? tokens : tokens.slice(0, at + 1);
  }

  // promptIds: the prompt's token ids when the bundle discloses them (copied drafts are then
  // read back from the context), else null. Resolves to {failures, unchecked}.
  async function review(request, decisions, promptIds = null) {
    const stated = request?.prompt?.token_count;
    const state = { ended: null, promptIds, emitted: [], unchecked: new Set(),
      assumedPrompt: null, afterSealed: false,
      // the prompt's length: as a format 2-3 request states it, or as the disclosed ids count it
      get promptCount() { return isInt(stated) ? stated : promptIds ? promptIds.length : this.assumedPrompt; },
      // the next decision's context_length: the prompt's tokens and those emitted so far
      get context() { return request && this.promptCount !== null ? this.promptCount + this.emitted.length : null; } };
    const out = [];
    for (const d of decisions) {
      const fail = (reason) => out.push({ step: d?.step, reason });
      try { await checkOne(d, request, state, fail); } catch (e) {
        fail(e instanceof Bad ? e.message : `the decision is not in the format's shape (${e.message})`);
      }
    }
    return { failures: out, unchecked: [...state.unchecked].sort() };
  }
  const failures = async (request, decisions, promptIds = null) => (await review(request, decisions, promptIds)).failures;

  async function checkOne(d, request, state, fail) {
    if (state.ended !== null) fail(`a decision follows one that ended the generation ('${state.ended}')`);
    const params = d.params;
    if (!params || typeof params !== "object" || Object.keys(params).sort().join() !== PARAMS.join()) {
      throw new Bad(`params must hold exactly ${PARAMS.join(", ")}`);
    }
    if (request) {
      const asked = request.params ?? {};
      const differing = PARAMS.filter((n) => !same(asked[n], params[n]));
      if (differing.length) fail(`params ${differing.join(", ")} differ from the request's`);
      for (const role of ["draft", "target"]) {
        if (!same(d[role], request.models?.[role])) fail(`the ${role} model differs from the request's`);
      }
    }
    const { seed, max_tokens: maxTokens, eos_token_id: eos } = params;
    const step = d.step;
    const coupled = isInt(d.v) && d.v >= COUPLED_SINCE;
    const rule = number(params.temperature, "params.temperature") === 0 ? GREEDY : coupled ? COUPLED : SAMPLING;
    if (d.rule !== rule) fail(`rule '${d.rule}': temperature ${params.temperature} in format ${d.v} means '${rule}'`);
    if (d.v >= 4 && "workings" in d) {  // sealed: only its clear keys are known
      state.unchecked.add("decisions whose workings are sealed: their drafts, numbers and tokens derive from a withheld text (docs/adr/0026)");
      state.afterSealed = true;
      state.ended = d.stop;
      return;
    }
    followContext(d.context_length, request, state, fail);
    if (state.context !== null && d.context_length !== state.context) {
      fail(`context_length ${d.context_length}: the prompt and the tokens emitted before make ${state.context}`);
    }
    const drafted = d.drafted, n = d.accepted_count, k = drafted.length;
    if (d.draft_length !== k) fail(`draft_length ${d.draft_length}, but ${k} tokens are drafted`);
    const budget = maxTokens - state.emitted.length - 1;
    if (k > Math.max(budget, 0) || k > params.draft_length) fail(`${k} drafted tokens: at most min(draft_length, ${budget}) may be`);
    if (!isInt(n) || n < 0 || n > k) throw new Bad(`accepted_count ${n} is not between 0 and ${k}`);
    const tokens = drafted.map((t, i) => token(t.token, `drafted[${i}].token`));
    // Coupled draws are keyed by output position: the tokens emitted before this decision.
    const at = { step, position: state.emitted.length };
    for (let i = 0; i < k; i++) await checkDrafted(d, i, drafted[i], n, rule, seed, at, fail);
    await checkCorrection(d, tokens, n, rule, seed, at, fail);
    const correction = token(d.correction.token, "correction.token");
    const emitted = checkEmitted(d, [...tokens.slice(0, n), correction], eos, state, fail);
    checkStop(d.stop, emitted, eos, maxTokens, request, state, fail);
    checkSource(d, tokens, state, fail);
    checkLogprobs(d, emitted, fail);
    checkShown(d, emitted, fail);
    if (n < k && (rule === GREEDY || rule === COUPLED)) {
      const what = rule === GREEDY ? "argmax" : "target's own draw";
      if (correction === null || tokens[n] === null) state.unchecked.add(`that a rejected ${rule === GREEDY ? "argmax " : ""}draft differs from the ${what} that replaced it (a token of it is withheld)`);
      else if (correction === tokens[n]) fail(`drafted[${n}] was rejected, yet the ${what} replacing it is the same`);
    }
    state.emitted.push(...emitted);
    state.ended = d.stop;
  }

  // Where the tokens before a decision are not known from the records before it (format 4: no
  // prompt length stated, or a sealed decision just before), its context_length tells them.
  function followContext(length, request, state, fail) {
    if (!isInt(length)) throw new Bad("context_length is not an integer");
    if (request && state.promptCount === null) {
      state.assumedPrompt = length - state.emitted.length;
      state.unchecked.add("the first decision's context_length against the prompt's length (the prompt's token ids are not disclosed)");
    }
    if (state.afterSealed && state.context !== null) {
      const unknown = length - state.context;
      if (unknown < 0) fail(`context_length ${length}: the prompt and the tokens emitted before make at least ${state.context}`);
      for (let i = 0; i < unknown; i++) state.emitted.push(null);
    }
    state.afterSealed = false;
  }

  // The emitted tokens are the accepted prefix and the correction (kept), cut after
  // end-of-sequence; returns what the rule emits. A sealed token (format 3, null) leaves only
  // the count to check where it would decide the cut.
  function checkEmitted(d, kept, eos, state, fail) {
    const emitted = d.emitted;
    if (!kept.includes(null)) {
      const expected = untilEos(kept, eos);
      if (JSON.stringify(emitted) !== JSON.stringify(expected)) {
        fail(`emitted ${JSON.stringify(emitted)}: the accepted prefix and the correction, cut after end-of-sequence, are ${JSON.stringify(expected)}`);
      }
      return expected;
    }
    const count = emitted.length, shown = kept.slice(0, count);
    if (!(count >= 1 && count <= kept.length)) fail(`emitted_count ${count}: the step keeps 1 to ${kept.length} tokens`);
    else if (!shown.includes(null)) {
      const ends = count === kept.length || (eos !== null && shown[count - 1] === eos);
      if (untilEos(shown, eos).length !== shown.length || !ends) {
        fail(`emitted ${JSON.stringify(shown)}: of the accepted prefix and the correction, only an end-of-sequence token cuts the rest, and none is emitted after it`);
      }
    } else {
      if (count < kept.length && d.stop !== "eos") fail(`emitted_count ${count} of ${kept.length}: only end-of-sequence cuts them short`);
      state.unchecked.add("which emitted tokens are end-of-sequence (the answer's tokens are withheld)");
    }
    return shown;
  }

  async function checkDrafted(d, i, t, n, rule, seed, { step, position }, fail) {
    const name = `drafted[${i}]`;
    if (t.accepted !== (i < n)) fail(`${name}.accepted ${t.accepted}: accepted_count ${n} makes it ${i < n}`);
    const p = number(t.p, `${name}.p`, 1), q = number(t.q, `${name}.q`, 1);
    if (copies(d) && t.q !== "1.0") fail(`${name}.q ${t.q}: a copied draft's q is one-hot, "1.0"`);
    if (rule === GREEDY) {
      if (t.ratio !== null || t.u !== null) fail(`${name}: greedy decisions carry no ratio and no draw`);
      return;
    }
    if (q === 0) throw new Bad(`${name}.q is 0: a drafter proposed a token it gives no probability`);
    const ratio = number(t.ratio, `${name}.ratio`);
    if (ratio !== p / q) fail(`${name}.ratio ${t.ratio} is not p / q = ${numberText(p / q)}`);
    if (i > n) {  // positions after the first rejection are not tested
      if (t.u !== null) fail(`${name}.u: a position after the first rejection is not tested`);
      return;
    }
    if (rule === COUPLED) {  // kept iff it is the target's own draw there: that needs the model
      const drawn = numberText(await outputUniform(seed, position + i));
      if (t.u !== drawn) fail(`${name}.u ${JSON.stringify(t.u)} is not the RNG's draw ${drawn} for output position ${position + i}`);
      return;
    }
    const u = await uniform(seed, step, i, "accept");
    if (t.u !== numberText(u)) fail(`${name}.u ${JSON.stringify(t.u)} is not the RNG's accept draw ${numberText(u)}`);
    const accepts = u < Math.min(1, ratio);
    if (accepts !== (i < n)) fail(`${name}: u ${numberText(u)} against min(1, ${t.ratio}) ${accepts ? "accepts" : "rejects"} it`);
  }

  async function checkCorrection(d, tokens, n, rule, seed, { step, position }, fail) {
    const c = d.correction, k = tokens.length;
    number(c.p, "correction.p", 1);
    let kind;
    if (rule === GREEDY) {
      kind = n < k ? "argmax" : "argmax-bonus";
      if (c.u !== null) fail("correction.u: an argmax is not drawn");
    } else if (rule === COUPLED) {
      kind = n < k ? "coupled" : "coupled-bonus";
      const u = numberText(await outputUniform(seed, position + n));
      if (c.u !== u) fail(`correction.u ${JSON.stringify(c.u)} is not the RNG's draw ${u} for output position ${position + n}`);
    } else {
      kind = n < k ? "residual" : "bonus";
      const u = numberText(await uniform(seed, step, n, kind));
      if (c.u !== u) fail(`correction.u ${JSON.stringify(c.u)} is not the RNG's ${kind} draw ${u}`);
    }
    if (c.kind !== kind) fail(`correction.kind '${c.kind}': ${n} of ${k} accepted makes it '${kind}'`);
    if (rule === GREEDY && n < k && Number(c.p) < Number(d.drafted[n].p)) fail("correction.p is below the rejected token's: it is not the argmax");
  }

  function checkStop(stop, emitted, eos, maxTokens, request, state, fail) {
    const total = state.emitted.length + emitted.length;
    if (total > maxTokens) fail(`${total} tokens emitted, more than max_tokens ${maxTokens}`);
    const rest = total >= maxTokens ? ["max_tokens", "stop"] : [null, "stop"];
    const expected = emitted.includes(null) ? [...(stop === "eos" ? ["eos"] : []), ...rest]
      : eos !== null && emitted.includes(eos) ? ["eos"] : rest;
    if (!expected.includes(stop)) fail(`stop ${JSON.stringify(stop)}, where the tokens make it one of ${JSON.stringify(expected)}`);
    const asked = request?.params;
    if (stop === "stop" && asked && typeof asked === "object" && !(asked.stop?.length)) fail("stop 'stop', but the request has no stop strings");
  }

  // The target's own log-probability of each emitted token: one per token, written as the
  // format writes numbers, at most 0 (its value needs the model: a replay checks it).
  function checkLogprobs(d, emitted, fail) {
    if (!("logprobs" in d)) return;  // records written before the field existed
    const values = d.logprobs;
    if (!Array.isArray(values) || values.length !== emitted.length) {
      fail(`logprobs must hold one entry per emitted token (${emitted.length})`);
      return;
    }
    values.forEach((value, i) => {
      const x = typeof value === "string" && value.trim() !== "" ? Number(value) : NaN;
      if (!Number.isFinite(x) || numberText(x) !== value) {
        fail(`logprobs[${i}] ${JSON.stringify(value)} is not written as the format writes numbers`);
      } else if (x > 0) fail(`logprobs[${i}] ${value} is above 0`);
    });
  }

  // What a record shows beside its tokens, where it has it: one text per emitted token (null only
  // for a sealed token), the target's top alternatives per emitted token (null: a sealed slot),
  // each a list of {token, logprob} with log-probabilities at most 0, and the step's timings as
  // non-negative whole microseconds.
  function isTop(top) {
    return Array.isArray(top) && top.every((e) => e && typeof e === "object" && !Array.isArray(e)
      && Object.keys(e).sort().join() === "logprob,token" && isInt(e.token) && e.token >= 0
      && typeof e.logprob === "string" && e.logprob.trim() !== "" && Number.isFinite(Number(e.logprob))
      && numberText(Number(e.logprob)) === e.logprob && Number(e.logprob) <= 0);
  }
  function checkShown(d, emitted, fail) {
    const n = emitted.length;
    if ("emitted_text" in d) {
      const texts = d.emitted_text;
      const ok = Array.isArray(texts) && texts.length === n
        && texts.every((t, i) => typeof t === "string" || (t === null && emitted[i] === null));
      if (!ok) fail(`emitted_text must hold one text per emitted token (${n})`);
    }
    if ("target_top" in d) {
      const tops = d.target_top;
      if (!Array.isArray(tops) || tops.length !== n) fail(`target_top must hold one entry per emitted token (${n})`);
      else tops.forEach((top, j) => {
        if (top !== null && !isTop(top)) fail(`target_top[${j}] is not a list of {token, logprob} with log-probabilities at most 0`);
      });
    }
    if ("timings_us" in d) {
      const t = d.timings_us;
      const ok = t && typeof t === "object" && !Array.isArray(t) && Object.keys(t).sort().join() === "draft,verify"
        && Object.values(t).every((x) => isInt(x) && x >= 0);
      if (!ok) fail("timings_us must be {draft, verify}, each a non-negative whole number");
    }
  }

  function checkSource(d, tokens, state, fail) {
    const k = tokens.length;
    if (!("draft_source" in d)) return;  // records written before the field existed
    const source = d.draft_source;
    if (!copies(d) || k === 0) {
      if (source !== null) fail("draft_source is set, but nothing was copied");
      return;
    }
    if (!source || typeof source !== "object" || Object.keys(source).sort().join() !== "match_length,offset,reference") {
      fail("a copied draft names no draft_source of reference, offset, match_length");
      return;
    }
    const { offset, match_length: length } = source;
    if (!isInt(offset) || !isInt(length)) fail("draft_source offset and match_length must be integers");
    else if (!(length >= 1 && length <= offset)) fail(`draft_source: a match of ${length} cannot end before offset ${offset}`);
    else if (source.reference !== "context") state.unchecked.add("drafts copied from another job (its tokens are that job's, not in this trail)");
    else if (state.context !== null && offset + k > state.context) {
      fail(`draft_source: ${k} tokens at offset ${offset} run past the context (${state.context} tokens)`);
    } else if (state.promptIds === null) state.unchecked.add("drafts copied from the context (the prompt's token ids are withheld)");
    else {  // read the copy back: the draft is the context's at offset, after a true match
      const context = [...state.promptIds, ...state.emitted];
      const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
      const needed = [...tokens, ...context.slice(Math.max(offset - length, 0), offset + k), ...context.slice(context.length - length)];
      if (needed.includes(null)) state.unchecked.add("drafts copied from the context (tokens they copy are withheld)");
      else if (!same(context.slice(offset, offset + k), tokens)) fail(`draft_source: the context's tokens at offset ${offset} are not the draft`);
      else if (length > context.length || !same(context.slice(offset - length, offset), context.slice(context.length - length))) {
        fail(`draft_source: the ${length} tokens before offset ${offset} do not match the context's last tokens`);
      }
    }
  }

  globalThis.PathfinderDecisionRule = { failures, review, uniform, numberText };
})();
