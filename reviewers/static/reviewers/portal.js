// Keyboard shortcuts on a trail: → or n next step, ← or p previous, g jumps (not while typing).
document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.target.closest("input, textarea, select, [contenteditable]")) return;
  const link = { ArrowRight: "next", n: "next", ArrowLeft: "prev", p: "prev" }[event.key];
  if (link) {
    const anchor = document.getElementById(link);
    if (anchor && anchor.href) { event.preventDefault(); anchor.click(); }
  } else if (event.key === "g") {
    const jump = document.getElementById("jump");
    if (jump) { event.preventDefault(); jump.focus(); jump.select(); }
  }
});

// After the step panel is swapped, mark the output tokens of the step now shown.
document.addEventListener("htmx:afterSwap", () => {
  const step = document.getElementById("step")?.dataset.step;
  document.querySelectorAll("#output a.token").forEach((token) => {
    token.classList.toggle("current", token.dataset.step === step);
  });
});
