"""The two web pages the API service serves itself (docs/web-pages.md): the playground at `/`
and the administrators' console at `/admin`. Plain HTML, CSS and JavaScript shipped in the package
(`static/`), no build step and nothing from another site; every call they make is one of the
public API's, authenticated with the key the person types."""

from serval_api.web.pages import router

__all__ = ["router"]
