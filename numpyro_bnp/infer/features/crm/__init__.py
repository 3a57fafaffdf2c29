"""The slice samplers for latent trait models with a completely random measure prior.

``CRMSlice`` (:mod:`~numpyro_bnp.infer.features.crm.slice`) and ``CRMTopicSlice``
(:mod:`~.topic_slice`) share the kernel shell (:mod:`~.kernel`), the model reader
(:mod:`~.model`), the atom series and its moves (:mod:`~.atoms`), the sweep over the series
(:mod:`~.sweep`), the count steps (:mod:`~.counts`) and the reported target density
(:mod:`~.target`); ``CRMSlice`` adds collapsed births (:mod:`~.births`), collapsed row moves
(:mod:`~.rows`) and tempered replicas (:mod:`~.tempering`); the topic model's token steps are
in :mod:`~.topics`.
"""
