/* Runs verify.js off the page's thread, so a bundle built to be slow can be stopped (the page
   terminates this worker at its time limit) and never freezes the page. The page sends the
   script URLs to load first, then the bundle: {scripts}, then {bytes, pins}. */
"use strict";
self.onmessage = async (event) => {
  const { scripts, bytes, pins } = event.data;
  if (scripts) { importScripts(...scripts); return; }
  try {
    self.postMessage(await self.PathfinderVerify.verify(bytes, pins));
  } catch (e) {  // verify() never rejects; this is the worker itself failing
    self.postMessage({ kind: "unreadable", ok: false, checks: [
      { name: "bundle", ok: false, failures: [`the verifier failed (${e.message})`], detail: "" }] });
  }
};
