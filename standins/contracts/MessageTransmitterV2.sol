// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

import {IMessageHandlerV2} from "./CctpV2Interfaces.sol";

/// @title MessageTransmitterV2
/// @notice QTG's minimal stand-in for Circle's CCTP V2 MessageTransmitterV2 (checked against
/// circlefin/evm-cctp-contracts src/v2/MessageTransmitterV2.sol and src/messages/v2/MessageV2.sol):
/// the same message layout, events, revert reasons and used-nonce bookkeeping, with one
/// attester (a 65-byte r || s || v ECDSA signature over keccak256(message), no prefix).
///
/// `sendMessage` emits the message with a zero nonce and a zero finalityThresholdExecuted; the
/// attester fills both in off-chain (and, for a burn, the body's feeExecuted and
/// expirationBlock) before it signs, so the message received differs from the one emitted.
///
/// Message layout (abi.encodePacked, big-endian integers):
///   field                       bytes   type      offset
///   version                     4       uint32    0
///   sourceDomain                4       uint32    4
///   destinationDomain           4       uint32    8
///   nonce                       32      bytes32   12
///   sender                      32      bytes32   44
///   recipient                   32      bytes32   76
///   destinationCaller           32      bytes32   108  (zero: anyone may call receiveMessage)
///   minFinalityThreshold        4       uint32    140
///   finalityThresholdExecuted   4       uint32    144
///   messageBody                 dynamic bytes     148
contract MessageTransmitterV2 {
    uint256 private constant MESSAGE_BODY_INDEX = 148;
    uint256 private constant SIGNATURE_LENGTH = 65;
    uint32 private constant FINALITY_THRESHOLD_FINALIZED = 2000;
    uint256 private constant NONCE_USED = 1;
    uint256 private constant HALF_CURVE_ORDER =
        0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    uint32 public immutable localDomain;
    uint32 public immutable version;
    uint256 public immutable maxMessageBodySize;
    address public owner;
    address public attester;
    // nonce (bytes32, assigned by the attester) => 1 once received; the zero nonce is claimed.
    mapping(bytes32 => uint256) public usedNonces;

    event MessageSent(bytes message);
    event MessageReceived(
        address indexed caller,
        uint32 sourceDomain,
        bytes32 indexed nonce,
        bytes32 sender,
        uint32 indexed finalityThresholdExecuted,
        bytes messageBody
    );
    event AttesterChanged(address indexed previousAttester, address indexed newAttester);

    constructor(uint32 localDomain_, address attester_, uint32 version_, uint256 maxBodySize_) {
        require(maxBodySize_ > 0, "MaxMessageBodySize is zero");
        localDomain = localDomain_;
        attester = attester_;
        version = version_;
        maxMessageBodySize = maxBodySize_;
        owner = msg.sender;
        usedNonces[bytes32(0)] = NONCE_USED;
    }

    function setAttester(address newAttester) external {
        require(msg.sender == owner, "Ownable: caller is not the owner");
        require(newAttester != address(0), "New attester must be nonzero");
        emit AttesterChanged(attester, newAttester);
        attester = newAttester;
    }

    function sendMessage(
        uint32 destinationDomain,
        bytes32 recipient,
        bytes32 destinationCaller,
        uint32 minFinalityThreshold,
        bytes calldata messageBody
    ) external {
        require(destinationDomain != localDomain, "Domain is local domain");
        require(messageBody.length <= maxMessageBodySize, "Message body exceeds max size");
        require(recipient != bytes32(0), "Recipient must be nonzero");
        emit MessageSent(
            abi.encodePacked(
                version,
                localDomain,
                destinationDomain,
                bytes32(0),
                bytes32(uint256(uint160(msg.sender))),
                recipient,
                destinationCaller,
                minFinalityThreshold,
                uint32(0),
                messageBody
            )
        );
    }

    function receiveMessage(bytes calldata message, bytes calldata attestation)
        external
        returns (bool)
    {
        _verifyAttestation(message, attestation);
        require(message.length >= MESSAGE_BODY_INDEX, "Invalid message: too short");
        require(uint32(bytes4(message[8:12])) == localDomain, "Invalid destination domain");
        bytes32 destinationCaller = bytes32(message[108:140]);
        if (destinationCaller != bytes32(0)) {
            require(
                destinationCaller == bytes32(uint256(uint160(msg.sender))),
                "Invalid caller for message"
            );
        }
        require(uint32(bytes4(message[0:4])) == version, "Invalid message version");
        bytes32 nonce = bytes32(message[12:44]);
        require(usedNonces[nonce] == 0, "Nonce already used");
        usedNonces[nonce] = NONCE_USED;

        uint32 sourceDomain = uint32(bytes4(message[4:8]));
        bytes32 sender = bytes32(message[44:76]);
        address recipient = address(uint160(uint256(bytes32(message[76:108]))));
        uint32 executed = uint32(bytes4(message[144:148]));
        bytes calldata body = message[MESSAGE_BODY_INDEX:];
        if (executed < FINALITY_THRESHOLD_FINALIZED) {
            require(
                IMessageHandlerV2(recipient).handleReceiveUnfinalizedMessage(
                    sourceDomain, sender, executed, body
                ),
                "handleReceiveUnfinalizedMessage() failed"
            );
        } else {
            require(
                IMessageHandlerV2(recipient).handleReceiveFinalizedMessage(
                    sourceDomain, sender, executed, body
                ),
                "handleReceiveFinalizedMessage() failed"
            );
        }
        emit MessageReceived(msg.sender, sourceDomain, nonce, sender, executed, body);
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
