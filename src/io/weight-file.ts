// One reader interface over the weight files a Hugging Face directory may hold: safetensors (read in
// place, safetensors.ts) and PyTorch's pytorch_model.bin (torch-checkpoint.ts). Model loaders open files
// through openWeightFile and never care which format they got.

import { SafetensorsReader } from './safetensors.js';
import type { SafetensorsDType, TensorData } from './safetensors.js';
import { TorchCheckpointReader } from './torch-checkpoint.js';

export interface WeightInfo {
  readonly name: string;
  readonly dtype: SafetensorsDType;
  readonly shape: readonly number[];
}

export interface WeightFile {
  readonly path: string;
  readonly tensors: readonly WeightInfo[];
  /** safetensors' __metadata__ (empty for a PyTorch file). */
  readonly metadata: Readonly<Record<string, string>>;
  has(name: string): boolean;
  info(name: string): WeightInfo;
  /** A tensor's bytes, row-major. */
  read(name: string): TensorData;
  /** The bytes of elements [start, end) of each range (row-major indices), concatenated. */
  readElements(name: string, ranges: readonly (readonly [number, number])[]): Uint8Array;
  /** An F32 / F16 / BF16 tensor (or the element ranges of it) as f32 values; a NaN or infinity is an error. */
  readFloats(name: string, ranges?: readonly (readonly [number, number])[]): Float32Array;
  close(): void;
}

/** Opens a weight file by its name: *.safetensors, else a PyTorch file (*.bin, *.pt, *.pth). */
export function openWeightFile(path: string): WeightFile {
  return path.endsWith('.safetensors') ? SafetensorsReader.open(path) : TorchCheckpointReader.open(path);
}
