// Ask before destructive actions: any form with data-confirm needs a yes.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

// One time rule (see portal/formatting.py and portal/timezones.py): the server renders every
// time in the reader's zone, the one named on <html data-time-zone>. Tell it the browser's zone
// (used until the reader chooses one), and write times made here (job.js) in the page's zone.
const browserZone = Intl.DateTimeFormat().resolvedOptions().timeZone;
if (browserZone && !document.cookie.split("; ").includes(`portal_tz=${browserZone}`)) {
  document.cookie = `portal_tz=${browserZone}; path=/; max-age=31536000; SameSite=Lax`;
}
const portalTime = (() => {
  const pageZone = document.documentElement.dataset.timeZone || undefined;
  let parts;
  try {
    parts = new Intl.DateTimeFormat("en-US", {
      year: "numeric", month: "short", day: "numeric", timeZone: pageZone,
      hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZoneName: "short",
    });
  } catch (error) {
    parts = new Intl.DateTimeFormat("en-US", {
      year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", hourCycle: "h23", timeZoneName: "short",
    });
  }
  const format = (moment, style) => {
    const p = {};
    parts.formatToParts(moment).forEach((part) => { p[part.type] = part.value; });
    const date = `${p.month} ${p.day}, ${p.year}`;
    const clock = `${p.hour}:${p.minute} ${p.timeZoneName}`;
    if (style === "date") return date;
    if (style === "time") return clock;
    return `${date}, ${clock}`;
  };
  const zoneName = () => format(new Date(), "time").split(" ").slice(1).join(" ");
  return { format, zoneName };
})();
window.portalTime = portalTime;

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
