"""The inference node: dials the API service, holds CTranslate2 models, runs inference."""
