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

// Booking form: the start is typed in the page's zone (the reader's, named beside the field).
// Send that zone's UTC offset at the typed time, and let "Use this slot" buttons fill the
// start field with the slot's wall-clock time in that zone.
const tzField = document.querySelector("input[name=tz_offset]");
if (tzField) {
  const startField = document.querySelector("input[name=start]");
  const pageZone = document.documentElement.dataset.timeZone || undefined;
  const wallClock = new Intl.DateTimeFormat("en-US", {
    timeZone: pageZone, year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
  });
  const wallParts = (moment) => {
    const p = {};
    wallClock.formatToParts(moment).forEach((part) => { p[part.type] = part.value; });
    return p;
  };
  // Minutes to add to the wall-clock time to get UTC, as getTimezoneOffset gives them.
  const offsetAt = (typed) => {
    const asUtc = Date.parse(`${typed}:00Z`);
    if (Number.isNaN(asUtc)) return null;
    let instant = asUtc;
    for (let i = 0; i < 3; i += 1) {
      const p = wallParts(new Date(instant));
      const shown = Date.UTC(+p.year, +p.month - 1, +p.day, +p.hour, +p.minute, +p.second);
      instant = asUtc + (instant - shown);
    }
    return Math.round((instant - asUtc) / 60000);
  };
  const syncOffset = () => {
    const now = wallParts(new Date());
    const typed = startField && startField.value
      ? startField.value.slice(0, 16)
      : `${now.year}-${now.month}-${now.day}T${now.hour}:${now.minute}`;
    const offset = offsetAt(typed);
    tzField.value = offset === null ? "" : offset;
  };
  syncOffset();
  if (startField) startField.addEventListener("change", syncOffset);
  document.querySelectorAll("[data-fill-start]").forEach((button) => {
    button.addEventListener("click", () => {
      const p = wallParts(new Date(button.dataset.fillStart));
      startField.value = `${p.year}-${p.month}-${p.day}T${p.hour}:${p.minute}`;
      syncOffset();
      startField.focus();
    });
  });
}
