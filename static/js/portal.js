// Ask before destructive actions: any form with data-confirm needs a yes.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});
