"""OpenAPI generation: every operation gets a one-line summary.

Viewsets state their own summaries with `extend_schema(summary=...)`; any operation without
one gets a summary derived from its action and resource ("List reservations", "Cancel a
reservation"), or from the first sentence of an APIView's docstring, so Swagger UI never shows
a bare path."""

from drf_spectacular.openapi import AutoSchema

SUMMARY_LENGTH = 80
STANDARD_ACTIONS = {
    "list": "List {plural}",
    "retrieve": "Get one {noun}",
    "create": "Create {a} {noun}",
    "update": "Replace {a} {noun}",
    "partial_update": "Change {a} {noun}",
    "destroy": "Delete {a} {noun}",
}


def _first_sentence(text: str | None) -> str:
    text = " ".join((text or "").split())
    if not text:
        return ""
    end = text.find(". ")
    sentence = (text if end < 0 else text[: end + 1]).rstrip(".")
    if len(sentence) > SUMMARY_LENGTH:
        # A summary is one line in Swagger UI's list; the rest stays in the description.
        cuts = [sentence.find(mark) for mark in (": ", " (", "; ", ", ")]
        cut = min((c for c in cuts if c > 0), default=SUMMARY_LENGTH)
        sentence = sentence[:cut]
    return sentence


class PortalAutoSchema(AutoSchema):
    def get_summary(self) -> str | None:
        return super().get_summary() or self._derived_summary()

    def _derived_summary(self) -> str:
        action = getattr(self.view, "action", None)
        basename = getattr(self.view, "basename", None)
        if action and basename:
            noun = basename.replace("-", " ")
            plural = noun if noun.endswith("s") else f"{noun}s"
            template = STANDARD_ACTIONS.get(action)
            if template:
                article = "an" if noun[:1] in "aeiou" else "a"
                return template.format(a=article, noun=noun, plural=plural)
            article = "an" if noun[:1] in "aeiou" else "a"
            return f"{action.replace('_', ' ').capitalize()} {article} {noun}"
        handler = getattr(self.view, self.method.lower(), None)
        sentence = _first_sentence(getattr(handler, "__doc__", None)) or _first_sentence(
            self.view.__class__.__doc__
        )
        return sentence or f"{self.method.upper()} {self.path}"
