// Renders the book's math with the KaTeX vendored beside this file, so it works offline.
// In the Markdown, write \\( ... \\) for inline math and \\[ ... \\] for a display: mdBook
// turns the doubled backslash into the \( \) and \[ \] that auto-render looks for.
document.addEventListener("DOMContentLoaded", function () {
  renderMathInElement(document.querySelector("main") || document.body, {
    delimiters: [
      { left: "\\[", right: "\\]", display: true },
      { left: "\\(", right: "\\)", display: false },
    ],
    throwOnError: false,
  });
});
