"""A page's markup as a tree, read with the standard library's HTML parser: the fleet report's page
(test_fleet_report_rows.py) and the DOM Chromium serializes from it (test_fleet_report_page.py)."""

from __future__ import annotations

from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Element:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Element | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Element | str] = []

    def text(self) -> str:
        return "".join(child if isinstance(child, str) else child.text() for child in self.children)

    def walk(self):
        for child in self.children:
            if isinstance(child, Element):
                yield child
                yield from child.walk()

    def find(self, tag: str, **attrs: str) -> list[Element]:
        return [
            element
            for element in self.walk()
            if element.tag == tag
            and all(value in (element.attrs.get(name) or "").split() for name, value in attrs.items())
        ]

    def one(self, tag: str, **attrs: str) -> Element:
        (found,) = self.find(tag, **attrs)
        return found


class DomTree(HTMLParser):
    """Markup as a tree (the pages read here close every element they open but the void ones)."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = self.current = Element("#document", {}, None)
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        element = Element(tag, dict(attrs), self.current)
        self.current.children.append(element)
        if tag not in VOID:
            self.current = element

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Element(tag, dict(attrs), self.current))

    def handle_endtag(self, tag):
        node = self.current
        while node.parent is not None and node.tag != tag:
            node = node.parent
        if node.parent is not None:
            self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)
