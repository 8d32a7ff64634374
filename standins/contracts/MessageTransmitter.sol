// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IMessageHandler} from "./CctpInterfaces.sol";

/// @title MessageTransmitter
/// @notice A minimal stand-in for Circle's CCTP v1 MessageTransmitter. It uses the same message
/// layout, events, nonce bookkeeping, revert reasons and attestation format (one attester, so the
/// attestation is a single 65-byte r || s || v ECDSA signature over keccak256(message), without
/// the "Ethereum Signed Message" prefix).
///
/// Message layout (abi.encodePacked, big-endian integers):
///   field               bytes   type      offset
///   version             4       uint32    0
///   sourceDomain        4       uint32    4
///   destinationDomain   4       uint32    8
///   nonce               8       uint64    12
///   sender              32      bytes32   20
///   recipient           32      bytes32   52
///   destinationCaller   32      bytes32   84   (zero: anyone may call receiveMessage)
///   messageBody         dynamic bytes     116
contract MessageTransmitter {
    uint256 private constant MESSAGE_BODY_INDEX = 116;
    uint256 private constant SIGNATURE_LENGTH = 65;
    // secp256k1n / 2: a signature with a larger s is a malleated copy and is refused.
    uint256 private constant HALF_CURVE_ORDER =
        0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    uint32 public immutable localDomain;
    uint32 public immutable version;
    address public owner;
    address public attester;
    // Next nonce this chain hands out for an outgoing message.
    uint64 public nextAvailableNonce;
    // keccak256(abi.encodePacked(sourceDomain, nonce)) => 1 once that message was received.
    mapping(bytes32 => uint256) public usedNonces;

    event MessageSent(bytes message);
    event MessageReceived(
        address indexed caller,
        uint32 sourceDomain,
        uint64 indexed nonce,
        bytes32 sender,
        bytes messageBody
    );
    event AttesterChanged(address indexed previousAttester, address indexed newAttester);

    constructor(uint32 localDomain_, address attester_, uint32 version_) {
        localDomain = localDomain_;
        attester = attester_;
        version = version_;
        owner = msg.sender;
    }

    function setAttester(address newAttester) external {
        require(msg.sender == owner, "Ownable: caller is not the owner");
        require(newAttester != address(0), "New attester must be nonzero");
        emit AttesterChanged(attester, newAttester);
        attester = newAttester;
    }

    /// @notice Emits `MessageSent` with the formatted message and returns the nonce it used.
    function sendMessage(uint32 destinationDomain, bytes32 recipient, bytes calldata messageBody)
        external
        returns (uint64 nonce)
    {
        require(recipient != bytes32(0), "Recipient must be nonzero");
        nonce = nextAvailableNonce;
        nextAvailableNonce = nonce + 1;
        bytes memory message = abi.encodePacked(
            version,
            localDomain,
            destinationDomain,
            nonce,
            bytes32(uint256(uint160(msg.sender))),
            recipient,
            bytes32(0),
            messageBody
        );
        emit MessageSent(message);
    }

    /// @notice Verifies the attestation, that the message is for this domain and that its
    /// (sourceDomain, nonce) was never received, marks it used, then hands the body to the
    /// recipient (the TokenMessenger, which mints).
    function receiveMessage(bytes calldata message, bytes calldata attestation)
        external
        returns (bool)
    {
        _verifyAttestation(message, attestation);
        require(message.length >= MESSAGE_BODY_INDEX, "Invalid message: too short");
        require(uint32(bytes4(message[8:12])) == localDomain, "Invalid destination domain");
        bytes32 destinationCaller = bytes32(message[84:116]);
        require(
            destinationCaller == bytes32(0)
                || destinationCaller == bytes32(uint256(uint160(msg.sender))),
            "Invalid caller for message"
        );
        require(uint32(bytes4(message[0:4])) == version, "Invalid message version");

        uint32 sourceDomain = uint32(bytes4(message[4:8]));
        uint64 nonce = uint64(bytes8(message[12:20]));
        bytes32 sourceAndNonce = keccak256(abi.encodePacked(sourceDomain, nonce));
        require(usedNonces[sourceAndNonce] == 0, "Nonce already used");
        usedNonces[sourceAndNonce] = 1;

        bytes32 sender = bytes32(message[20:52]);
        address recipient = address(uint160(uint256(bytes32(message[52:84]))));
        bytes calldata body = message[MESSAGE_BODY_INDEX:];
        require(
            IMessageHandler(recipient).handleReceiveMessage(sourceDomain, sender, body),
            "handleReceiveMessage() failed"
        );
        emit MessageReceived(msg.sender, sourceDomain, nonce, sender, body);
        return true;
    }

    function _verifyAttestation(bytes calldata message, bytes calldata attestation)
        internal
        view
    {
        require(attestation.length == SIGNATURE_LENGTH, "Invalid attestation length");
        bytes32 r = bytes32(attestation[0:32]);
        bytes32 s = bytes32(attestation[32:64]);
        uint8 v = uint8(attestation[64]);
        require(uint256(s) <= HALF_CURVE_ORDER, "ECDSA: invalid signature 's' value");
        require(v == 27 || v == 28, "ECDSA: invalid signature 'v' value");
        address signer = ecrecover(keccak256(message), v, r, s);
        require(signer != address(0), "ECDSA: invalid signature");
        require(signer == attester, "Invalid signature: not attester");
    }
}
