// What CUDA this process can use: which libraries load, the driver version and the GPUs. Never
// throws — `fuseformer info` prints the result and backend selection reads `available`.

import { cudaDriver, DeviceAttribute } from './driver.js';
import { CUDA_LIBRARIES, loadCudaLibrary, loadedFilePath, type CudaLibraryName } from './library.js';

export interface LibraryProbe {
  name: CudaLibraryName;
  /** The loaded file, or null when it could not be loaded. */
  path: string | null;
  error?: string;
}

export interface DeviceProbe {
  name: string;
  /** "9.0" for an H100/H200. */
  computeCapability: string;
  memoryBytes: number;
  multiProcessors: number;
}

export interface CudaProbe {
  /** True when the CUDA backend can start: driver, NVRTC and cuBLASLt load and a GPU is visible. */
  available: boolean;
  /** Why it is not available. */
  reason?: string;
  libraries: LibraryProbe[];
  /** The driver's CUDA version, e.g. "13.0". */
  driverVersion?: string;
  devices?: DeviceProbe[];
}

/** The libraries the CUDA backend cannot start without (NCCL is only needed for several GPUs). */
const REQUIRED: readonly CudaLibraryName[] = ['cuda', 'nvrtc', 'cublasLt'];

export function probeCuda(): CudaProbe {
  const libraries = (Object.keys(CUDA_LIBRARIES) as CudaLibraryName[]).map(probeLibrary);
  const missing = libraries.filter((l) => REQUIRED.includes(l.name) && l.path === null);
  const result: CudaProbe = { available: false, libraries };
  if (libraries.find((l) => l.name === 'cuda')?.path === null) {
    result.reason = `the CUDA driver library could not be loaded (${CUDA_LIBRARIES.cuda.install})`;
    return result;
  }
  try {
    const driver = cudaDriver();
    const version = driver.driverVersion();
    result.driverVersion = `${Math.floor(version / 1000)}.${Math.floor((version % 1000) / 10)}`;
    const devices: DeviceProbe[] = [];
    const count = driver.deviceCount();
    for (let ordinal = 0; ordinal < count; ordinal++) {
      const device = driver.deviceGet(ordinal);
      devices.push({
        name: driver.deviceName(device),
        computeCapability: `${driver.deviceAttribute(device, DeviceAttribute.COMPUTE_CAPABILITY_MAJOR)}.${driver.deviceAttribute(device, DeviceAttribute.COMPUTE_CAPABILITY_MINOR)}`,
        memoryBytes: driver.deviceTotalMemory(device),
        multiProcessors: driver.deviceAttribute(device, DeviceAttribute.MULTIPROCESSOR_COUNT),
      });
    }
    result.devices = devices;
    if (devices.length === 0) {
      result.reason = 'the CUDA driver loaded but reports no GPU';
    } else if (missing.length > 0) {
      result.reason = `missing ${missing.map((l) => CUDA_LIBRARIES[l.name].description).join(' and ')}: ${CUDA_LIBRARIES[missing[0]!.name].install}`;
    } else {
      result.available = true;
    }
  } catch (err) {
    result.reason = err instanceof Error ? err.message : String(err);
  }
  return result;
}

function probeLibrary(name: CudaLibraryName): LibraryProbe {
  try {
    return { name, path: loadedFilePath(loadCudaLibrary(name)) };
  } catch (err) {
    return { name, path: null, error: err instanceof Error ? err.message : String(err) };
  }
}
