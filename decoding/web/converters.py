"""Path converters: an object id in a URL (a file's, a batch's) is ASCII letters, digits, `_`
and `-`, so anything else in its place (a NUL, a surrogate, a space) is a 404 from the URL
resolver, before a query is made."""

from django.urls import register_converter


class ObjectId:
    regex = "[A-Za-z0-9_-]{1,64}"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(ObjectId, "objectid")
