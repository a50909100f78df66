// Ask before destructive actions: any form with data-confirm needs a yes.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

// Show <time datetime> values in the reader's own time zone (the server renders UTC).
document.querySelectorAll("time[datetime]").forEach((el) => {
  const moment = new Date(el.getAttribute("datetime"));
  if (!Number.isNaN(moment.getTime())) {
    el.title = el.textContent;
    el.textContent = moment.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
  }
});

// Booking form: send the browser's UTC offset with the local start time, and let
// "Use this slot" buttons fill the start field in local time.
const tzField = document.querySelector("input[name=tz_offset]");
if (tzField) {
  const startField = document.querySelector("input[name=start]");
  const syncOffset = () => {
    const local = startField && startField.value ? new Date(startField.value) : new Date();
    tzField.value = local.getTimezoneOffset();
  };
  syncOffset();
  if (startField) startField.addEventListener("change", syncOffset);
  document.querySelectorAll("[data-fill-start]").forEach((button) => {
    button.addEventListener("click", () => {
      const moment = new Date(button.dataset.fillStart);
      const pad = (n) => String(n).padStart(2, "0");
      startField.value = `${moment.getFullYear()}-${pad(moment.getMonth() + 1)}-${pad(moment.getDate())}T${pad(moment.getHours())}:${pad(moment.getMinutes())}`;
      syncOffset();
      startField.focus();
    });
  });
}
