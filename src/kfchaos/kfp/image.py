"""The component image, as the KFP glue names it: components, the pipeline and the doctor import it from here.

The rule itself lives in kfchaos.image (the model layer) so that the GPU fault, which runs its pod on the same
image, need not import the KFP glue above it (docs/architecture.md).
"""

from kfchaos.image import DEFAULT_REPOSITORY, IMAGE_ENV, component_image, image_tag

__all__ = ["DEFAULT_REPOSITORY", "IMAGE_ENV", "component_image", "image_tag"]
