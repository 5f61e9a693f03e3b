// fuseformer's public API: what `import { … } from 'fuseformer'` gives a TypeScript program. The backends
// and their tensors; Hugging Face model directories for inference (GPT-2, Llama family, BERT, Marian),
// generation and serving; sentence embeddings and reranking; training; tokenizers and safetensors; quantization; the errors every one of
// them throws. The CUDA backend is reached through selectBackend(), which loads it only where a GPU is.

export { selectBackend } from './backend/index.js';
export type { BackendChoice, BackendSelection } from './backend/index.js';
export type { Backend } from './backend/backend.js';
export { CpuBackend } from './backend/cpu/index.js';
export { Tensor, formatShape } from './tensor.js';
export type { DType, FloatDType } from './dtype.js';
export {
  FuseformerError, ArgumentError, ShapeError, DTypeError, LayoutError, CudaError, LibraryNotFoundError,
  KernelCompileError, OutOfMemoryError,
} from './errors.js';

// Inference: decoder-only models, generation, speculative decoding, BERT encoding, translation.
export { loadDecoderModel, randomDecoderModel, DecoderModel } from './infer/model.js';
export type { LoadOptions, LoadedModel } from './infer/model.js';
export { generate, generateBatch, generateText, defaultStopTokenIds } from './infer/generate.js';
export type { GenerateOptions, TextGenerateOptions } from './infer/generate.js';
export { resolveSampling } from './infer/sampling.js';
export type { SamplingOptions, ResolvedSampling } from './infer/sampling.js';
export { DecodeEngine } from './infer/engine.js';
export type { EngineOptions, SequenceRequest } from './infer/engine.js';
export { BertEncoder, padSequences } from './infer/bert.js';
export type { BertLoadOptions, BertEmbeddingOptions, BertEncoding, LoadedBert } from './infer/bert.js';
// Sentence embeddings (BERT-family and decoder models such as Qwen3-Embedding) and reranking (cross-encoders,
// decoder rerankers such as Qwen3-Reranker).
export { Embedder, EmbedInputError } from './infer/embedder.js';
export type { EmbedderOptions, Embedded, PromptOptions, SentenceEncoder } from './infer/embedder.js';
export { DecoderEncoder } from './infer/decoder-encoder.js';
export type { DecoderEncoderOptions } from './infer/decoder-encoder.js';
export type { Pooling, EmbeddingOptions, PendingEmbeddings } from './infer/pooling.js';
export { Reranker } from './infer/reranker.js';
export type { RerankerOptions, Reranked, RerankPair, ScoredPairs, PairScorer } from './infer/reranker.js';
export type { PairTemplate } from './infer/chat-pairs.js';
export { loadSeq2Seq, translate, translateText } from './infer/seq2seq.js';
export type { Translator, TranslateOptions, Translation } from './infer/seq2seq.js';
export { loadQuantizedDecoderModel, quantizeDecoderModel, quantizeLmHead } from './infer/quantized.js';
export type { QuantizeDecoderOptions } from './infer/quantized.js';
export { quantizeDecoder } from './quant/decoder-quantize.js';
export type { QuantizeOptions } from './quant/quantize.js';
export type { QuantizedModel } from './quant/model.js';
export { saveQuantizedModel, loadQuantizedModel } from './quant/checkpoint.js';
export type { SaveQuantizedOptions } from './quant/checkpoint.js';

// Serving: continuous batching over a paged KV cache, and the OpenAI-compatible HTTP server.
export { ServingEngine } from './serve/engine.js';
export type { ServingEngineOptions, ServingSpeculation, GenerationRequest, TokenEvent, FinishReason, EngineStats } from './serve/engine.js';
export { InferenceServer } from './serve/server.js';
export type { ServerOptions, ServedEngine } from './serve/server.js';
export { EmbeddingServer } from './serve/embedding-server.js';
export type { EmbeddingServerOptions } from './serve/embedding-server.js';
export { RerankServer } from './serve/rerank-server.js';
export type { RerankServerOptions } from './serve/rerank-server.js';
export { warmUp } from './serve/warmup.js';
export type { WarmupReport } from './serve/warmup.js';

// Training.
export { trainLanguageModel } from './train/trainer.js';
export type { TrainConfig, TrainModel, TrainResult, TrainIo } from './train/trainer.js';
export { loadModelConfig, presetConfig, PRESET_NAMES } from './models/registry.js';
export type { ModelConfig } from './models/registry.js';

// Files: tokenizers and safetensors.
export { loadTokenizer, createTokenizer, TokenizerError } from './io/tokenizer.js';
export type { Tokenizer, EncodeOptions, DecodeOptions } from './io/tokenizer.js';
export { createByteTokenizer } from './io/byte-tokenizer.js';
export { SafetensorsReader, SafetensorsError, writeSafetensors } from './io/safetensors.js';
export type { TensorInfo, TensorToWrite, SafetensorsDType } from './io/safetensors.js';
