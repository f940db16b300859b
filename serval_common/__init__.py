"""Code shared by the API service, inference nodes and build jobs: settings, the model store
client and manifest, language codes and logging. Generated wire code lives in `serval`."""
